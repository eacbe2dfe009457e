// =============================================================================================
// FlashAttention from scratch, step by step, in CUDA C++
// Step 09: the forward on tensor cores: fp16/bf16 in, fp32 accumulation, mma.sync + ldmatrix
//
// What changes since step 06: the algorithm is the same (online softmax over key tiles, causal in
// stages), but every multiply-add of Q·Kᵀ and P·V now runs on the tensor cores, one warp-wide
// `mma.sync.aligned.m16n8k16` at a time (16×8 outputs, 16-deep dot products: 4096 FLOP per
// instruction, against 64 for a warp-wide FFMA). Q, K, V and O are fp16 or bf16; products
// accumulate in fp32; the softmax statistics and the LSE stay fp32.
//
// The work splits by warp, not by thread: each of the 4 warps owns 16 query rows of the block
// for the whole kernel, so a row's max and sum live in the 4 lanes that hold it (two shuffles).
//
//   Q tile     [BLOCK_M, D] smem, read ONCE into registers as mma A fragments (qf)
//   K, V tile  [BLOCK_N, D] smem, read per tile with ldmatrix (V with .trans)
//   S = Q·Kᵀ   [16, BLOCK_N] per warp, fp32 accumulator fragments (s)
//   P          the same registers, exponentiated and packed to fp16/bf16 pairs: the C fragment
//              of S·... IS the A fragment of P·V (docs/09 draws it), so P never touches shared
//              memory: step 06 stored P transposed and read it back
//   O          [16, D] per warp, fp32 accumulator fragments (acc)
//
// What this step leaves for step 10 (and why it is not yet fast):
//   - shared memory is plain row-major: a row of K or V is 128 or 256 bytes, so the 8 row
//     addresses of an ldmatrix phase all start in the same 4 banks: 8-way bank conflicts
//     (ncu shows them; step 10 swizzles);
//   - K and V tiles are loaded with plain loads, synchronously: the warps wait for memory at
//     every tile, with only other blocks on the SM to cover the wait (step 10: cp.async,
//     multi-stage);
//   - expf with the scale applied to S by a separate multiply (step 10: exp2, folded).
//
// Tiles: BLOCK_M = 64 (4 warps × 16 rows), BLOCK_N = 64, head_dim instances 64 and 128 (any
// head_dim ≤ 128 that is a multiple of 8 is padded with zeros up to an instance).
//
// Build + run:  cmake --build build --target 09_tensor_core_forward && build/bin/09_tensor_core_forward
// Read with:    docs/09_tensor_core_forward.md
// =============================================================================================
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "check.h"
#include "launch.h"
#include "ops.h"

namespace step09 {

const fa::StepInfo& info();  // bottom of the file: the step's name for messages

constexpr int kWarp = 32;
constexpr int WARPS = 4;
constexpr int THREADS = WARPS * kWarp;
constexpr int BLOCK_M = WARPS * 16;   // 16 query rows per warp: the M of one mma
constexpr int BLOCK_N = 64;           // keys per tile

// ---- the three PTX instructions of this step -------------------------------------------------------
// ldmatrix.x4: the warp reads four 8×8 matrices of 16-bit elements from shared memory. Lanes
// 8i..8i+7 give the addresses of the 8 rows (16 bytes each) of matrix i; afterwards register i of
// lane l holds row l/4, elements 2·(l%4) and 2·(l%4)+1 of matrix i, which is exactly how
// mma.m16n8k16 wants its A and B fragments laid out. `.trans` delivers each matrix transposed.
__device__ __forceinline__ void ldmatrix_x4(std::uint32_t (&r)[4], const void* smem) {
  const auto a = static_cast<std::uint32_t>(__cvta_generic_to_shared(smem));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}
__device__ __forceinline__ void ldmatrix_x4_trans(std::uint32_t (&r)[4], const void* smem) {
  const auto a = static_cast<std::uint32_t>(__cvta_generic_to_shared(smem));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}

// c [16×8, fp32] += a [16×16] · b [16×8], one warp. Fragments (g = lane/4, t = lane%4):
//   a[0]: A[g][2t, 2t+1]   a[1]: A[g+8][2t, 2t+1]   a[2]: A[g][2t+8, +9]   a[3]: A[g+8][2t+8, +9]
//   b0:   B[2t, 2t+1][g]   b1:   B[2t+8, 2t+9][g]
//   c[0], c[1]: C[g][2t, 2t+1]                       c[2], c[3]: C[g+8][2t, 2t+1]
template <class T>
__device__ __forceinline__ void mma_16816(float (&c)[4], const std::uint32_t (&a)[4], std::uint32_t b0,
                                          std::uint32_t b1) {
  if constexpr (std::is_same_v<T, __half>)
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  else
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Two fp32 values -> one register of two fp16/bf16 (x in the low half: the lower column).
template <class T>
__device__ __forceinline__ std::uint32_t pack(float x, float y) {
  if constexpr (std::is_same_v<T, __half>) {
    const __half2 h = __floats2half2_rn(x, y);
    return *reinterpret_cast<const std::uint32_t*>(&h);
  } else {
    const __nv_bfloat162 h = __floats2bfloat162_rn(x, y);
    return *reinterpret_cast<const std::uint32_t*>(&h);
  }
}

// As in step 02: a row that has seen only -inf shifts by 0, so its exponentials are 0, not NaN.
__device__ __forceinline__ float safe_shift(float m) { return m == -INFINITY ? 0.f : m; }

// Max / sum over the 4 lanes that hold a row of a C fragment (lanes 4g .. 4g+3).
__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

// ---- device memory -> shared memory ----------------------------------------------------------------
// A [ROWS, D] tile of one head's [seq, head_dim] matrix into smem [ROWS, D], row-major, 16 bytes
// (8 elements) per thread per load: the 8 lanes of a row chunk read one 128-byte line. Rows >= seq
// and columns >= head_dim are stored as zeros (a masked key's P = 0 times its V row must stay 0,
// and 0·garbage could be NaN).
template <int ROWS, int D, class T>
__device__ __forceinline__ void load_tile(T* dst, const T* __restrict__ src, int row0, int seq, int head_dim) {
  constexpr int CHUNKS = D / 8;  // 16-byte chunks per row
  static_assert(ROWS * CHUNKS % THREADS == 0, "every thread moves the same number of chunks");
#pragma unroll
  for (int i = threadIdx.x; i < ROWS * CHUNKS; i += THREADS) {
    const int r = i / CHUNKS, c = i % CHUNKS * 8;
    uint4 x = make_uint4(0, 0, 0, 0);
    if (row0 + r < seq && c < head_dim)  // head_dim % 8 == 0: a chunk is wholly in or out
      x = *reinterpret_cast<const uint4*>(src + std::size_t(row0 + r) * head_dim + c);
    *reinterpret_cast<uint4*>(dst + r * D + c) = x;
  }
}

// ---- the kernel ----------------------------------------------------------------------------------------
// grid (query blocks, batch·heads); block THREADS. T: __half or __nv_bfloat16. D: head_dim padded
// up to the instance.
template <class T, int D>
__global__ void __launch_bounds__(THREADS)
    tc_forward(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v, T* __restrict__ o,
               float* __restrict__ lse, int seq_q, int seq_k, int head_dim, float scale, bool causal) {
  static_assert(D % 16 == 0 && BLOCK_N % 16 == 0, "whole 16-deep mma steps over head_dim and keys");
  extern __shared__ uint4 smem[];        // uint4: 16-byte alignment for ldmatrix and the vector stores
  T* Qs = reinterpret_cast<T*>(smem);    // [BLOCK_M, D]
  T* Ks = Qs + BLOCK_M * D;              // [BLOCK_N, D]
  T* Vs = Ks + BLOCK_N * D;              // [BLOCK_N, D]

  // Causal: the last query block (the most key tiles) runs first, as in step 06.
  const int qb = causal ? gridDim.x - 1 - blockIdx.x : blockIdx.x;
  const int m0 = qb * BLOCK_M;        // first query row of this block
  const std::size_t bh = blockIdx.y;  // flattened (batch, head)
  q += bh * seq_q * head_dim, k += bh * seq_k * head_dim, v += bh * seq_k * head_dim;
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int g = lane / 4, t4 = lane % 4;  // this lane's fragment row (g, g+8) and column pair (2·t4)

  // Q once: to shared memory, then into registers as A fragments for the whole kernel.
  load_tile<BLOCK_M, D>(Qs, q, m0, seq_q, head_dim);
  __syncthreads();
  std::uint32_t qf[D / 16][4];  // [16, D] this warp's Q rows, A fragments: k-step kk = dims 16kk..16kk+15
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk)  // lanes 0-15: rows 0-15 at dim 16kk, lanes 16-31: at 16kk + 8
    ldmatrix_x4(qf[kk], Qs + (warp * 16 + lane % 16) * D + kk * 16 + lane / 16 * 8);

  float acc[D / 8][4];  // [16, D] unnormalised O rows, C fragments: n-tile j = dims 8j..8j+7
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};  // rows g and g+8: running max, partial sum
#pragma unroll
  for (int j = 0; j < D / 8; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.f;

  // The stages of step 06. Tiles [0, n_full) need no mask (causal: every key <= m0; non-causal:
  // every key < seq_k); the loop ends with the last tile holding a key the block's last row sees.
  const int kv_end = causal ? min(seq_k, min(m0 + BLOCK_M, seq_q)) : seq_k;
  const int n_tiles = (kv_end + BLOCK_N - 1) / BLOCK_N;
  const int n_full = (causal ? min(m0 + 1, seq_k) : seq_k) / BLOCK_N;

  auto attend = [&](int t, auto masked) {
    const int n0 = t * BLOCK_N;  // first key of this tile
    __syncthreads();             // every warp is done with the previous K and V tiles
    load_tile<BLOCK_N, D>(Ks, k, n0, seq_k, head_dim);
    load_tile<BLOCK_N, D>(Vs, v, n0, seq_k, head_dim);
    __syncthreads();

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
        ldmatrix_x4(b, Ks + (jj * 16 + lane % 8 + lane / 16 * 8) * D + kk * 16 + lane / 8 % 2 * 8);
        mma_16816<T>(s[2 * jj], qf[kk], b[0], b[1]);
        mma_16816<T>(s[2 * jj + 1], qf[kk], b[2], b[3]);
      }

    // Scale, then mask the diagonal tiles only: keys past seq_k and (causal) keys after the query.
    // Element e of n-tile j is row g + 8·(e/2), key n0 + 8j + 2·t4 + e%2.
#pragma unroll
    for (int j = 0; j < BLOCK_N / 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        s[j][e] *= scale;
        if constexpr (decltype(masked)::value) {
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
      const float m_new = fmaxf(m[h], quad_max(tile_max));
      const float shift = safe_shift(m_new);
      const float alpha = expf(m[h] - shift);  // e^(m_old - m_new): 0 on the first tile, 1 if the max held
      m[h] = m_new;
      float sum = 0.f;
#pragma unroll
      for (int j = 0; j < BLOCK_N / 8; ++j) {
        s[j][2 * h] = expf(s[j][2 * h] - shift), s[j][2 * h + 1] = expf(s[j][2 * h + 1] - shift);
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
        ldmatrix_x4_trans(b, Vs + (kk * 16 + lane % 8 + lane / 8 % 2 * 8) * D + dd * 16 + lane / 16 * 8);
        mma_16816<T>(acc[2 * dd], a, b[0], b[1]);
        mma_16816<T>(acc[2 * dd + 1], a, b[2], b[3]);
      }
    }
  };
  int t = 0;
  for (; t < n_full; ++t) attend(t, std::false_type{});  // no mask
  for (; t < n_tiles; ++t) attend(t, std::true_type{});  // the diagonal and the ragged end of the keys

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
    if (t4 == 0) lse[row] = row_l > 0.f ? m[h] + logf(row_l) : -INFINITY;
  }
}

// ---- launcher ---------------------------------------------------------------------------------------------
template <class T, int D>
void launch(const fa::AttnFwdArgs& a, cudaStream_t stream) {
  constexpr std::size_t smem = sizeof(T) * (BLOCK_M + 2 * BLOCK_N) * D;  // 24 KB | 48 KB
  static const bool ready = [] {                                         // once per instance
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
    fa::StepInfo s{"09_tensor_core_forward",
                   "tensor cores: mma.sync m16n8k16 + ldmatrix, fp16/bf16 in, fp32 accumulate, P kept in registers",
                   fa::Family::Attention};
    s.attn_fwd = forward;
    s.attn_rule = {{fa::DType::F16, fa::DType::BF16}, 128, 8};
    return s;
  }();
  return i;
}

}  // namespace step09
