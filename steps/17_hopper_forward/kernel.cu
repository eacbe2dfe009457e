// =============================================================================================
// FlashAttention from scratch, step by step, in CUDA C++
// Step 17: the Hopper forward: tiles moved by the bulk tensor copy engine (TMA) onto mbarriers,
//          both products on wgmma, one instruction stream per warpgroup
//
// What changes since step 11: the math (online softmax, exp2, causal stages, the LSE) is step
// 11's; the machinery under it is Hopper's own (sm_90a), in three parts.
//
//   1. TMA. A tensor map (built on the host, host/tensor_map.h) describes Q, K and V as
//      [batch·heads, seq, head_dim] and a box of [rows, 64 dims]. One thread copies a whole box into
//      shared memory with one instruction, swizzled (128-byte pattern) the way wgmma reads it; rows
//      past seq arrive as zeros. No thread computes an address or issues a cp.async per 16 bytes.
//   2. mbarriers. A copy completes by counting its bytes down on an mbarrier; the block waits on
//      the barrier's phase parity. Q has one barrier, K/V a ring of STAGES barriers.
//   3. wgmma. A warpgroup (4 warps, 128 threads) owns 64 query rows. S = Q·Kᵀ reads both operands
//      straight from shared memory through 64-bit descriptors (no ldmatrix); O += P·V takes P from
//      the registers the softmax left it in and V from shared memory. The tensor cores run
//      asynchronously: fence, issue, commit, wait.
//
// What it does not do yet (steps 18-19): specialise warps (here every warp computes and thread 0 also
// issues the copies), overlap one warpgroup's softmax with another's products, or persist.
//
// Block: WARPGROUPS = 2 warpgroups, BLOCK_M = 128 query rows; K/V tiles of BLOCK_N = 128 keys in
// a ring of STAGES = 2. Per K/V tile t:
//   wait kv_full[t % 2] (parity t / 2 % 2)         the tile is in shared memory
//   S = Q·Kᵀ        wgmma m64n128k16 × D/16, A and B from shared memory        [64, 128] per warpgroup
//   softmax         rows g, g+8 of each warp's 16, as step 11 (4 lanes per row)
//   O += P·V        wgmma m64nDk16 × 8, A (P) from registers, B (V) from shared memory   [64, D]
//   __syncthreads, then thread 0 refills the slot with tile t + 2
//
// Build + run:  cmake --build build --target 17_hopper_forward && build/bin/17_hopper_forward
// Read with:    docs/17_hopper_forward.md
// =============================================================================================
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "check.h"
#include "cp_async.cuh"
#include "hopper.cuh"
#include "launch.h"
#include "mma_sync.cuh"
#include "ops.h"
#include "tensor_map.h"

namespace step17 {
using namespace fa::ptx;  // step 09's pack, quad_*; step 10's exp2_approx; this step's hopper.cuh

const fa::StepInfo& info();  // bottom of the file: the step's name for messages

constexpr int kWarp = 32, kWarpgroup = 128;
constexpr int kBox = 64;  // dims per TMA box: 64 16-bit elements = 128 bytes, one swizzle row

template <int D_>
struct Config {
  static constexpr int D = D_, WARPGROUPS = 2, THREADS = WARPGROUPS * kWarpgroup;
  static constexpr int BLOCK_M = 64 * WARPGROUPS, BLOCK_N = 128, STAGES = 2;
  static constexpr int HALVES = D / kBox;  // boxes per row of a tile: [HALVES][rows][64]
  // Bytes of one tile: rows of HALVES boxes of 128 bytes, each box a multiple of 1024 bytes.
  static constexpr int Q_BYTES = BLOCK_M * D * 2, KV_BYTES = BLOCK_N * D * 2;
  // Q, then K[STAGES], V[STAGES], then the barriers; 1024 more for aligning the start.
  static constexpr int SMEM_BYTES = Q_BYTES + 2 * STAGES * KV_BYTES + 64 + 1024;
  static_assert(D == 64 || D == 128, "head_dim instances 64 and 128");
  static_assert(SMEM_BYTES <= 227 * 1024, "an sm_90 block's shared memory");
};

__device__ __forceinline__ float safe_shift(float m) { return m == -INFINITY ? 0.f : m; }  // step 10

// ---- the kernel: one block of BLOCK_M query rows of one head, every K/V tile they see --------------------
// grid (query blocks, batch·heads); block C::THREADS. T: __half or __nv_bfloat16. The tensor maps
// describe Q [bh, seq_q, head_dim] and K, V [batch·kv_heads, seq_k, head_dim] in boxes of [rows, 64];
// query head h reads K/V head h / heads_per_kv (GQA; 1 for MHA).
template <class T, class C>
__global__ void __launch_bounds__(C::THREADS)
    hopper_forward(const __grid_constant__ CUtensorMap tm_q, const __grid_constant__ CUtensorMap tm_k,
                   const __grid_constant__ CUtensorMap tm_v, T* __restrict__ o, float* __restrict__ lse, int seq_q,
                   int seq_k, int head_dim, float scale, bool causal, int heads_per_kv) {
  constexpr int D = C::D, BLOCK_M = C::BLOCK_M, BLOCK_N = C::BLOCK_N, STAGES = C::STAGES, HALVES = C::HALVES;
  const float sl2 = scale * 1.4426950408889634f;  // step 10: exp(scale·(s − m)) = 2^(s·sl2 − m·sl2)
  extern __shared__ uint4 smem_raw[];
  // The 128-byte swizzle repeats every 1024 bytes and wgmma's descriptors assume each tile starts
  // on such a boundary (base offset 0): align the start.
  const std::uint32_t raw = smem_addr(smem_raw), base = (raw + 1023) & ~1023u;
  char* smem = reinterpret_cast<char*>(smem_raw) + (base - raw);
  T* Qs = reinterpret_cast<T*>(smem);                      // [HALVES][BLOCK_M][64] swizzled
  T* Ks = reinterpret_cast<T*>(smem + C::Q_BYTES);         // [STAGES][HALVES][BLOCK_N][64]
  T* Vs = Ks + STAGES * BLOCK_N * D;                       // [STAGES][HALVES][BLOCK_N][64]
  auto* bars = reinterpret_cast<std::uint64_t*>(Vs + STAGES * BLOCK_N * D);
  std::uint64_t* q_full = bars;       // Q has landed
  std::uint64_t* kv_full = bars + 1;  // [STAGES]: K and V of the slot's tile have landed

  // Causal: the last query block (the most key tiles) runs first, as in step 06.
  const int qb = causal ? gridDim.x - 1 - blockIdx.x : blockIdx.x;
  const int m0 = qb * BLOCK_M;       // first query row of this block
  const int bh = blockIdx.y;         // flattened (batch, head): the tensor maps' outer coordinate
  const int kv_bh = bh / heads_per_kv;  // flattened (batch, K/V head): b·H + h over H/KVH (step 11)
  const int wg = threadIdx.x / kWarpgroup;  // this thread's warpgroup: query rows 64·wg .. 64·wg + 63
  const int warp = threadIdx.x % kWarpgroup / kWarp, lane = threadIdx.x % kWarp;
  const int g = lane / 4, q4 = lane % 4;   // accumulator rows g, g+8 of the warp's 16; columns 2·q4, +1
  const int r0 = 64 * wg + 16 * warp + g;  // this thread's first row in the block (the other: r0 + 8)

  // The stages of step 06.
  const int kv_end = causal ? min(seq_k, min(m0 + BLOCK_M, seq_q)) : seq_k;
  const int n_tiles = (kv_end + BLOCK_N - 1) / BLOCK_N;
  const int n_full = (causal ? min(m0 + 1, seq_k) : seq_k) / BLOCK_N;

  // Thread 0 sets up the barriers (one arrival each: its own expect_tx) and issues Q and the
  // first STAGES K/V tiles; a box counts on the barrier whether or not it reaches past seq.
  auto issue_kv = [&](int t) {  // thread 0: K_t and V_t into slot t % STAGES
    const int s = t % STAGES;
    mbarrier_arrive_expect_tx(&kv_full[s], 2 * C::KV_BYTES);
#pragma unroll
    for (int h = 0; h < HALVES; ++h) {
      tma_load_3d(Ks + (s * HALVES + h) * BLOCK_N * kBox, &tm_k, &kv_full[s], h * kBox, t * BLOCK_N, kv_bh);
      tma_load_3d(Vs + (s * HALVES + h) * BLOCK_N * kBox, &tm_v, &kv_full[s], h * kBox, t * BLOCK_N, kv_bh);
    }
  };
  if (threadIdx.x == 0) {
    mbarrier_init(q_full, 1);
    for (int s = 0; s < STAGES; ++s) mbarrier_init(&kv_full[s], 1);
    fence_barrier_init();
  }
  __syncthreads();  // the barriers exist before anyone waits on them
  if (threadIdx.x == 0) {
    mbarrier_arrive_expect_tx(q_full, C::Q_BYTES);
#pragma unroll
    for (int h = 0; h < HALVES; ++h) tma_load_3d(Qs + h * BLOCK_M * kBox, &tm_q, q_full, h * kBox, m0, bh);
    for (int t = 0; t < STAGES && t < n_tiles; ++t) issue_kv(t);
  }

  // The descriptors' start addresses (bytes in shared memory), per operand:
  //   Q: this warpgroup's 64 rows of box h, k-step kk within it at + 32·kk
  //   K: slot s, box h, all BLOCK_N rows;   V: slot s, keys 16·kk.. at + 2048·kk, boxes LBO apart
  const std::uint32_t q_addr = smem_addr(Qs) + wg * 64 * 128, k_addr = smem_addr(Ks), v_addr = smem_addr(Vs);
  constexpr std::uint32_t kSbo = 8 * 128;         // 8 rows of 128 bytes: one swizzle period
  constexpr std::uint32_t kVLbo = BLOCK_N * 128;  // V: from dims 0-63 to dims 64-127 of the same keys

  float acc[D / 2];  // [64, D] this warpgroup's unnormalised O: register i = row r0 + 8·(i/2 % 2), col 8·(i/4) + 2·q4 + i % 2
#pragma unroll
  for (int i = 0; i < D / 2; ++i) acc[i] = 0.f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};  // rows r0, r0 + 8: running max (raw), partial sum
  float s[BLOCK_N / 2];  // [64, BLOCK_N] scores, the same layout as acc
#pragma unroll
  for (int i = 0; i < BLOCK_N / 2; ++i) s[i] = 0.f;

  mbarrier_wait(q_full, 0);
  auto attend = [&](int t, auto masked) {
    const int n0 = t * BLOCK_N, slot = t % STAGES;
    mbarrier_wait(&kv_full[slot], t / STAGES % 2);  // the slot's (t / STAGES)-th fill has landed

    // S = Q·Kᵀ: D/16 wgmma into one accumulator, the first overwriting it (accumulate = 0). The
    // fence orders the softmax's reads of s (last tile) before the tensor cores write it.
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      const std::uint32_t a = q_addr + (kk / 4) * BLOCK_M * 128 + (kk % 4) * 32;
      const std::uint32_t b = k_addr + (slot * HALVES + kk / 4) * BLOCK_N * 128 + (kk % 4) * 32;
      wgmma_ss<BLOCK_N, T>(s, smem_desc(a, 16, kSbo), smem_desc(b, 16, kSbo), kk > 0);
    }
    wgmma_commit();
    wgmma_wait<0>();

    // Mask the diagonal tiles only (step 10). Register i: row r0 + 8·(i/2 % 2), key n0 + 8·(i/4) + 2·q4 + i % 2.
    if constexpr (decltype(masked)::value) {
#pragma unroll
      for (int i = 0; i < BLOCK_N / 2; ++i) {
        const int row = m0 + r0 + 8 * (i / 2 % 2), key = n0 + 8 * (i / 4) + 2 * q4 + i % 2;
        if (key >= (causal ? min(row + 1, seq_k) : seq_k)) s[i] = -INFINITY;
      }
    }

    // The online softmax of step 11 on the wgmma layout: a row's BLOCK_N scores are spread over
    // the 4 lanes of its quad, BLOCK_N/8 pairs each (registers 4j + 2h + e of row r0 + 8h).
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float tile_max = -INFINITY;
#pragma unroll
      for (int j = 0; j < BLOCK_N / 8; ++j) tile_max = fmaxf(tile_max, fmaxf(s[4 * j + 2 * h], s[4 * j + 2 * h + 1]));
      const float m_new = fmaxf(m[h], quad_max(tile_max));
      const float alpha = exp2_approx((m[h] - safe_shift(m_new)) * sl2);
      m[h] = m_new;
      const float shift = safe_shift(m_new) * sl2;
      float sum = 0.f;
#pragma unroll
      for (int j = 0; j < BLOCK_N / 8; ++j) {
        s[4 * j + 2 * h] = exp2_approx(fmaf(s[4 * j + 2 * h], sl2, -shift));
        s[4 * j + 2 * h + 1] = exp2_approx(fmaf(s[4 * j + 2 * h + 1], sl2, -shift));
        sum += s[4 * j + 2 * h] + s[4 * j + 2 * h + 1];
      }
      l[h] = l[h] * alpha + sum;
#pragma unroll
      for (int j = 0; j < D / 8; ++j) acc[4 * j + 2 * h] *= alpha, acc[4 * j + 2 * h + 1] *= alpha;
    }

    // O += P·V. P's k-step kk (keys 16kk..16kk+15) is S's column blocks 2kk and 2kk+1: packed in
    // order, they are exactly wgmma's A registers (no shuffle: doc 17). The fence orders the
    // packing and the rescale of acc before the tensor cores read and write them.
    std::uint32_t p[BLOCK_N / 16][4];
#pragma unroll
    for (int kk = 0; kk < BLOCK_N / 16; ++kk)
#pragma unroll
      for (int j = 0; j < 4; ++j) p[kk][j] = pack<T>(s[8 * kk + 2 * j], s[8 * kk + 2 * j + 1]);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < BLOCK_N / 16; ++kk)
      wgmma_rs<D, T>(acc, p[kk], smem_desc(v_addr + slot * C::KV_BYTES + kk * 16 * 128, kVLbo, kSbo), 1);
    wgmma_commit();
    wgmma_wait<0>();

    // Every warpgroup is done with this slot (its wgmma have completed): refill it.
    __syncthreads();
    if (threadIdx.x == 0 && t + STAGES < n_tiles) issue_kv(t + STAGES);
  };
  int t = 0;
  for (; t < n_full; ++t) attend(t, std::false_type{});  // no mask
  for (; t < n_tiles; ++t) attend(t, std::true_type{});  // the diagonal and the ragged end of the keys

  // O = acc / l, LSE = m·scale + log l (step 11), stored straight from the registers: each lane
  // writes 4 bytes of rows r0 and r0 + 8 per 8 dims.
  o += std::size_t(bh) * seq_q * head_dim, lse += std::size_t(bh) * seq_q;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const float row_l = quad_sum(l[h]);
    const float inv_l = row_l > 0.f ? 1.f / row_l : 0.f;
    const int row = m0 + r0 + 8 * h;
    if (row < seq_q) {
#pragma unroll
      for (int j = 0; j < D / 8; ++j) {
        const int col = 8 * j + 2 * q4;
        if (col < head_dim)
          *reinterpret_cast<std::uint32_t*>(o + std::size_t(row) * head_dim + col) =
              pack<T>(acc[4 * j + 2 * h] * inv_l, acc[4 * j + 2 * h + 1] * inv_l);
      }
      if (q4 == 0) lse[row] = row_l > 0.f ? m[h] * scale + logf(row_l) : -INFINITY;
    }
  }
}

// ---- launcher --------------------------------------------------------------------------------------------
template <class T, class C>
void launch(const fa::AttnFwdArgs& a, cudaStream_t stream) {
  static const bool ready = [] {
    fa::opt_in_shared_memory(hopper_forward<T, C>, C::SMEM_BYTES, info().name);
    return true;
  }();
  (void)ready;
  const fa::AttnParams& p = a.p;
  const long long bh = (long long)p.batch * p.heads, kv_bh = (long long)p.batch * fa::kv_heads_of(p);
  const char* name = info().name;
  const CUtensorMap tm_q = fa::tensor_map_16bit_3d(a.q, p.dtype, bh, p.seq_q, p.head_dim, C::BLOCK_M, kBox, name, "Q");
  const CUtensorMap tm_k = fa::tensor_map_16bit_3d(a.k, p.dtype, kv_bh, p.seq_k, p.head_dim, C::BLOCK_N, kBox, name, "K");
  const CUtensorMap tm_v = fa::tensor_map_16bit_3d(a.v, p.dtype, kv_bh, p.seq_k, p.head_dim, C::BLOCK_N, kBox, name, "V");
  const dim3 grid((p.seq_q + C::BLOCK_M - 1) / C::BLOCK_M, unsigned(bh));
  hopper_forward<T, C><<<grid, C::THREADS, C::SMEM_BYTES, stream>>>(tm_q, tm_k, tm_v, static_cast<T*>(a.o), a.lse,
                                                                    p.seq_q, p.seq_k, p.head_dim, p.scale, p.causal,
                                                                    p.heads / fa::kv_heads_of(p));
  FA_CHECK_LAUNCH();
}

template <class T>
void launch_dim(const fa::AttnFwdArgs& a, cudaStream_t stream) {
  if (a.p.head_dim <= 64)
    launch<T, Config<64>>(a, stream);
  else
    launch<T, Config<128>>(a, stream);
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
    fa::StepInfo s{"17_hopper_forward",
                   "the Hopper forward: TMA tile copies on mbarriers, both products on wgmma (sm_90a)",
                   fa::Family::Attention};
    s.attn_fwd = forward;
    s.attn_rule = {{fa::DType::F16, fa::DType::BF16}, 128, 8};
    s.attn_rule.positive_scale = true;  // step 11's softmax: the row max on unscaled scores
    s.attn_rule.gqa = true;             // grouped-query attention (step 11)
    s.needs_cc = 90;
    return s;
  }();
  return i;
}

}  // namespace step17
