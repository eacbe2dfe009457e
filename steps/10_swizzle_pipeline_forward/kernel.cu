// =============================================================================================
// FlashAttention from scratch, step by step, in CUDA C++
// Step 10: swizzled shared memory, a multi-stage cp.async pipeline for K and V, exp2
//
// What changes since step 09: how the tiles reach shared memory and where they sit there; the
// mma work per tile is step 09's, instruction for instruction. Three ideas:
//
//   1. XOR swizzle. Step 09 stored a tile row-major: row r, 16-byte chunk c at byte r·(2D) + 16c.
//      A row is 128 or 256 bytes, a multiple of the 128 bytes that the 32 banks span, so the 8
//      rows one ldmatrix phase reads all start on the same 4 banks: 8-way conflicts, every time.
//      Here chunk c of row r is stored at chunk position c ^ (r % 8). The 8 rows of a phase now
//      hit 8 different chunk positions, i.e. all 32 banks once: conflict-free, with no padding.
//      The same holds for the 16-byte cp.async writes of a row (a permutation within the row).
//   2. cp.async pipeline. K and V tiles go global -> shared memory with cp.async (no registers,
//      no wait at the issue) into a ring of STAGES buffers. While the warps compute tile t, the
//      copies of tiles t+1 .. t+STAGES-1 are in flight; the wait at the top of iteration t is
//      only for tile t, issued STAGES-1 iterations earlier.
//   3. exp2. exp(x) = 2^(x·log2 e): with log2(e) folded into the softmax scale, each score costs
//      one FFMA (s·scale·log2e − m·scale·log2e) and one MUFU.EX2, where step 09 spent a multiply
//      for the scale and expf's range reduction. The row max is taken on the raw scores (valid
//      for a positive scale, which the step's attn_rule now requires).
//
// Tiles and warps are step 09's: BLOCK_M = 64 (4 warps × 16 rows), BLOCK_N = 64, head_dim
// instances 64 and 128; STAGES = 3 K/V buffers (d = 64: 56 KB of shared memory, room for 4 blocks
// per SM, but its registers per thread (profiles/h100/ptxas.csv) allow 3; d = 128: 112 KB, 2 blocks).
//
// Build + run:  cmake --build build --target 10_swizzle_pipeline_forward && build/bin/10_swizzle_pipeline_forward
// Read with:    docs/10_swizzle_pipeline_forward.md
// =============================================================================================
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "check.h"
#include "launch.h"
#include "mma_sync.cuh"
#include "ops.h"

namespace step10 {
using namespace fa::ptx;  // step 09's ldmatrix_x4, mma_16816, pack, quad_max, quad_sum

const fa::StepInfo& info();  // bottom of the file: the step's name for messages

constexpr int kWarp = 32;
constexpr int WARPS = 4;
constexpr int THREADS = WARPS * kWarp;
constexpr int BLOCK_M = WARPS * 16;   // 16 query rows per warp: the M of one mma
constexpr int BLOCK_N = 64;           // keys per tile
constexpr int STAGES = 3;             // K/V tiles in flight or in use: the ring of buffers

// ---- the two PTX instructions of this step ---------------------------------------------------------
// (ldmatrix, mma.sync, pack and the quad reductions are step 09's, from device/mma_sync.cuh.)
//
// cp.async.cg: 16 bytes global -> shared memory without passing through registers (and without
// allocating in L1: .cg). src_bytes = 0 writes 16 zero bytes and reads nothing (rows past seq).
// Copies are grouped with commit_group; wait_group<N> waits until at most N of this thread's
// groups are still in flight.
__device__ __forceinline__ void cp_async_16(void* smem, const void* gmem, int src_bytes) {
  const auto a = static_cast<std::uint32_t>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(a), "l"(gmem), "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// 2^x on the special-function unit (one MUFU.EX2; 2^-inf = 0).
__device__ __forceinline__ float exp2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// As in step 02: a row that has seen only -inf shifts by 0, so its exponentials are 0, not NaN.
__device__ __forceinline__ float safe_shift(float m) { return m == -INFINITY ? 0.f : m; }

// ---- the swizzled layout ---------------------------------------------------------------------------
// Element offset of (row r, 16-byte chunk c) in a [ROWS, D] tile: the chunk moves to c ^ (r % 8)
// within its row. For D = 64 a row is exactly 8 chunks; for D = 128 (16 chunks) the XOR flips only
// the low 3 bits, so a chunk stays in its half of the row. Every access below is a whole 16-byte
// chunk, so the layout is invisible to the math.
template <int D>
__device__ __forceinline__ int swz(int r, int c) {
  return r * D + ((c ^ (r & 7)) << 3);
}

// ---- device memory -> shared memory ----------------------------------------------------------------
// A [ROWS, D] tile of one head's [seq, head_dim] matrix into smem (swizzled), one cp.async of 16
// bytes per thread per chunk: the 8 lanes of a row chunk read one 128-byte line. Rows >= seq and
// columns >= head_dim are zero-filled (a masked key's P = 0 times its V row must stay 0, and
// 0·garbage could be NaN). Issue only: the caller commits and waits.
template <int ROWS, int D, class T>
__device__ __forceinline__ void load_tile_async(T* dst, const T* __restrict__ src, int row0, int seq,
                                                int head_dim) {
  constexpr int CHUNKS = D / 8;  // 16-byte chunks per row
  static_assert(ROWS * CHUNKS % THREADS == 0, "every thread moves the same number of chunks");
#pragma unroll
  for (int i = threadIdx.x; i < ROWS * CHUNKS; i += THREADS) {
    const int r = i / CHUNKS, c = i % CHUNKS;
    const bool in = row0 + r < seq && 8 * c < head_dim;  // head_dim % 8 == 0: a chunk is wholly in or out
    const T* from = in ? src + std::size_t(row0 + r) * head_dim + 8 * c : src;  // a valid address either way
    cp_async_16(dst + swz<D>(r, c), from, in ? 16 : 0);
  }
}

// ---- the kernel ----------------------------------------------------------------------------------------
// grid (query blocks, batch·heads); block THREADS. T: __half or __nv_bfloat16. D: head_dim padded
// up to the instance.
template <class T, int D>
__global__ void __launch_bounds__(THREADS)
    tc_forward(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v, T* __restrict__ o,
               float* __restrict__ lse, int seq_q, int seq_k, int head_dim, float scale, bool causal) {
  // scale·log2(e): exp(scale·(s − m)) = 2^(s·sl2 − m·sl2), one FFMA + one EX2 per score
  const float sl2 = scale * 1.4426950408889634f;
  static_assert(D % 16 == 0 && BLOCK_N % 16 == 0, "whole 16-deep mma steps over head_dim and keys");
  extern __shared__ uint4 smem[];        // uint4: 16-byte alignment for ldmatrix and cp.async
  T* Qs = reinterpret_cast<T*>(smem);    // [BLOCK_M, D] swizzled
  T* Ks = Qs + BLOCK_M * D;              // [STAGES][BLOCK_N, D] swizzled, a ring
  T* Vs = Ks + STAGES * BLOCK_N * D;     // [STAGES][BLOCK_N, D] swizzled, a ring

  // Causal: the last query block (the most key tiles) runs first, as in step 06.
  const int qb = causal ? gridDim.x - 1 - blockIdx.x : blockIdx.x;
  const int m0 = qb * BLOCK_M;        // first query row of this block
  const std::size_t bh = blockIdx.y;  // flattened (batch, head)
  q += bh * seq_q * head_dim, k += bh * seq_k * head_dim, v += bh * seq_k * head_dim;
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int g = lane / 4, t4 = lane % 4;  // this lane's fragment row (g, g+8) and column pair (2·t4)

  // The stages of step 06. Tiles [0, n_full) need no mask (causal: every key <= m0; non-causal:
  // every key < seq_k); the loop ends with the last tile holding a key the block's last row sees.
  const int kv_end = causal ? min(seq_k, min(m0 + BLOCK_M, seq_q)) : seq_k;
  const int n_tiles = (kv_end + BLOCK_N - 1) / BLOCK_N;
  const int n_full = (causal ? min(m0 + 1, seq_k) : seq_k) / BLOCK_N;

  // The pipeline's prologue: Q, then K/V tiles 0 .. STAGES-2, each its own commit group (an empty
  // group past the last tile, so that every thread always counts the same groups).
  load_tile_async<BLOCK_M, D>(Qs, q, m0, seq_q, head_dim);
  cp_async_commit();
  auto issue = [&](int t) {  // K_t and V_t into ring slot t % STAGES
    if (t < n_tiles) {
      T* slot_k = Ks + t % STAGES * BLOCK_N * D;
      T* slot_v = Vs + t % STAGES * BLOCK_N * D;
      load_tile_async<BLOCK_N, D>(slot_k, k, t * BLOCK_N, seq_k, head_dim);
      load_tile_async<BLOCK_N, D>(slot_v, v, t * BLOCK_N, seq_k, head_dim);
    }
    cp_async_commit();
  };
#pragma unroll
  for (int t = 0; t < STAGES - 1; ++t) issue(t);

  // Q into registers as A fragments for the whole kernel (its group is the oldest: wait for all
  // but the STAGES-1 K/V groups).
  cp_async_wait<STAGES - 1>();
  __syncthreads();
  std::uint32_t qf[D / 16][4];  // [16, D] this warp's Q rows, A fragments: k-step kk = dims 16kk..16kk+15
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk)  // lanes 0-15: rows 0-15 at chunk 2kk, lanes 16-31: at chunk 2kk + 1
    ldmatrix_x4(qf[kk], Qs + swz<D>(warp * 16 + lane % 16, 2 * kk + lane / 16));

  float acc[D / 8][4];  // [16, D] unnormalised O rows, C fragments: n-tile j = dims 8j..8j+7
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};  // rows g and g+8: running max, partial sum
#pragma unroll
  for (int j = 0; j < D / 8; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.f;

  auto attend = [&](int t, auto masked) {
    const int n0 = t * BLOCK_N;  // first key of this tile
    cp_async_wait<STAGES - 2>();  // this thread's copies of tile t have landed ...
    __syncthreads();              // ... and everyone's; every warp is also done with tile t-1
    issue(t + STAGES - 1);        // into slot (t-1) % STAGES, free since the barrier
    const T* Kt = Ks + t % STAGES * BLOCK_N * D;
    const T* Vt = Vs + t % STAGES * BLOCK_N * D;

    // S = Q·Kᵀ: B[d][key] = K[key][d], so a B fragment is 8 keys × 16 dims of K read row by row:
    // plain ldmatrix. One x4 covers keys 16jj..16jj+15 (two n-tiles) × dims 16kk..16kk+15.
    float s[BLOCK_N / 8][4];  // [16, BLOCK_N] scores, C fragments: n-tile j = keys n0+8j .. n0+8j+7
#pragma unroll
    for (int j = 0; j < BLOCK_N / 8; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.f;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk)
#pragma unroll
      for (int jj = 0; jj < BLOCK_N / 16; ++jj) {
        std::uint32_t b[4];  // matrices: keys +0..7 × dims +0..7, +0..7 × +8..15, +8..15 × +0..7, +8..15 × +8..15
        ldmatrix_x4(b, Kt + swz<D>(jj * 16 + lane % 8 + lane / 16 * 8, 2 * kk + lane / 8 % 2));
        mma_16816<T>(s[2 * jj], qf[kk], b[0], b[1]);
        mma_16816<T>(s[2 * jj + 1], qf[kk], b[2], b[3]);
      }

    // Mask the diagonal tiles only: keys past seq_k and (causal) keys after the query. Element e
    // of n-tile j is row g + 8·(e/2), key n0 + 8j + 2·t4 + e%2. The scores stay unscaled.
    if constexpr (decltype(masked)::value) {
#pragma unroll
      for (int j = 0; j < BLOCK_N / 8; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int row = m0 + warp * 16 + g + 8 * (e / 2), key = n0 + 8 * j + 2 * t4 + e % 2;
          if (key >= (causal ? min(row + 1, seq_k) : seq_k)) s[j][e] = -INFINITY;
        }
    }

    // The online-softmax step of rows g (h = 0: elements 0, 1) and g + 8 (h = 1: elements 2, 3).
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float tile_max = -INFINITY;
#pragma unroll
      for (int j = 0; j < BLOCK_N / 8; ++j) tile_max = fmaxf(tile_max, fmaxf(s[j][2 * h], s[j][2 * h + 1]));
      const float m_new = fmaxf(m[h], quad_max(tile_max));  // raw scores: scale > 0 keeps the argmax
      const float shift = safe_shift(m_new) * sl2;
      const float alpha = exp2_approx((m[h] - safe_shift(m_new)) * sl2);  // first tile: 0; max held: exactly 1
      m[h] = m_new;
      float sum = 0.f;
#pragma unroll
      for (int j = 0; j < BLOCK_N / 8; ++j) {
        s[j][2 * h] = exp2_approx(fmaf(s[j][2 * h], sl2, -shift));
        s[j][2 * h + 1] = exp2_approx(fmaf(s[j][2 * h + 1], sl2, -shift));
        sum += s[j][2 * h] + s[j][2 * h + 1];
      }
      l[h] = l[h] * alpha + sum;  // this lane's keys only; the quad's sum is taken once, at the end
#pragma unroll
      for (int j = 0; j < D / 8; ++j) acc[j][2 * h] *= alpha, acc[j][2 * h + 1] *= alpha;
    }

    // O += P·V. The C fragments of n-tiles 2kk and 2kk+1 (keys 16kk..16kk+15) are, element for
    // element, the A fragment of k-step kk: the P operand is built in registers, no shuffle, no
    // shared memory. B[key][d] = V[key][d] needs 2 keys per register, but V rows hold dims side by
    // side: ldmatrix.trans reads 8 keys × 8 dims and hands each lane the transposed pairs.
#pragma unroll
    for (int kk = 0; kk < BLOCK_N / 16; ++kk) {
      const std::uint32_t a[4] = {pack<T>(s[2 * kk][0], s[2 * kk][1]), pack<T>(s[2 * kk][2], s[2 * kk][3]),
                                  pack<T>(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                                  pack<T>(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
      for (int dd = 0; dd < D / 16; ++dd) {
        std::uint32_t b[4];  // matrices: keys +0..7 × dims +0..7, +8..15 × +0..7, +0..7 × +8..15, +8..15 × +8..15
        ldmatrix_x4_trans(b, Vt + swz<D>(kk * 16 + lane % 8 + lane / 8 % 2 * 8, 2 * dd + lane / 16));
        mma_16816<T>(acc[2 * dd], a, b[0], b[1]);
        mma_16816<T>(acc[2 * dd + 1], a, b[2], b[3]);
      }
    }
  };
  int t = 0;
  for (; t < n_full; ++t) attend(t, std::false_type{});  // no mask
  for (; t < n_tiles; ++t) attend(t, std::true_type{});  // the diagonal and the ragged end of the keys
  cp_async_wait<0>();  // only empty groups are left; leave no copy pending at exit

  // O = acc / l, LSE = m + log l. A row with l = 0 (no visible key: impossible with top-left causal
  // and seq_k >= 1, kept safe anyway) gets O = 0 and LSE = -inf. Each lane stores 2 elements (4
  // bytes) per n-tile; the 4 lanes of a row cover 16 contiguous bytes.
  o += bh * seq_q * head_dim, lse += bh * seq_q;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const float row_l = quad_sum(l[h]);
    const int row = m0 + warp * 16 + g + 8 * h;
    if (row >= seq_q) continue;
    const float inv_l = row_l > 0.f ? 1.f / row_l : 0.f;
#pragma unroll
    for (int j = 0; j < D / 8; ++j) {
      const int col = 8 * j + 2 * t4;
      if (col < head_dim)
        *reinterpret_cast<std::uint32_t*>(o + std::size_t(row) * head_dim + col) =
            pack<T>(acc[j][2 * h] * inv_l, acc[j][2 * h + 1] * inv_l);
    }
    if (t4 == 0) lse[row] = row_l > 0.f ? m[h] * scale + logf(row_l) : -INFINITY;  // m is a raw score
  }
}

// ---- launcher ---------------------------------------------------------------------------------------------
template <class T, int D>
void launch(const fa::AttnFwdArgs& a, cudaStream_t stream) {
  constexpr std::size_t smem = sizeof(T) * (BLOCK_M + 2 * STAGES * BLOCK_N) * D;  // 56 KB | 112 KB
  static const bool ready = [] {  // once per instance: more than 48 KB of dynamic shared memory
    fa::opt_in_shared_memory(tc_forward<T, D>, smem, info().name);
    return true;
  }();
  (void)ready;
  const fa::AttnParams& p = a.p;
  const dim3 grid((p.seq_q + BLOCK_M - 1) / BLOCK_M, p.batch * p.heads);
  tc_forward<T, D><<<grid, THREADS, smem, stream>>>(static_cast<const T*>(a.q), static_cast<const T*>(a.k),
                                                    static_cast<const T*>(a.v), static_cast<T*>(a.o), a.lse, p.seq_q,
                                                    p.seq_k, p.head_dim, p.scale, p.causal);
  FA_CHECK_LAUNCH();
}

template <class T>
void launch_dim(const fa::AttnFwdArgs& a, cudaStream_t stream) {
  // head_dim is padded up to an instance with zeros: they add nothing to Q·Kᵀ, and O's padding
  // columns are never stored.
  if (a.p.head_dim <= 64)
    launch<T, 64>(a, stream);
  else
    launch<T, 128>(a, stream);
}

void forward(const fa::AttnFwdArgs& a, cudaStream_t stream) {
  fa::check_attention_launch(info(), a.p, {a.q, a.k, a.v, a.o}, "Q, K, V and O");
  if (a.p.dtype == fa::DType::F16)
    launch_dim<__half>(a, stream);
  else
    launch_dim<__nv_bfloat16>(a, stream);
}

const fa::StepInfo& info() {
  static const fa::StepInfo i = [] {
    fa::StepInfo s{"10_swizzle_pipeline_forward",
                   "XOR-swizzled shared memory, a 3-stage cp.async K/V pipeline, exp2 with log2(e) in the scale",
                   fa::Family::Attention};
    s.attn_fwd = forward;
    s.attn_rule = {{fa::DType::F16, fa::DType::BF16}, 128, 8};
    s.attn_rule.positive_scale = true;
    return s;
  }();
  return i;
}

}  // namespace step10
