// =============================================================================================
// FlashAttention from scratch, step by step, in CUDA C++
// Step 20: the Hopper backward: Q and dO tiles by TMA onto mbarriers, the five products on wgmma
//
// What changes since step 16: the algorithm is the FA2 backward of steps 12-16 (delta computed
// once, a block per key tile that walks the query tiles, P recomputed from the LSE, dQ added in
// fp32); the machinery is step 17's (TMA, mbarriers, wgmma), and the products are transposed so
// that each operand sits where wgmma can read it.
//
//   1. Sᵀ = K·Qᵀ and dPᵀ = V·dOᵀ, not S and dP: with the keys as wgmma's M, the accumulators hold
//      Pᵀ and dSᵀ, and an accumulator turns into an A operand in registers (step 17's P), so
//      dV += Pᵀ·dO and dK += dSᵀ·Q read their A from registers. A register A cannot be transposed.
//   2. dO and Q serve twice: K-major (d contiguous) for Sᵀ and dPᵀ, MN-major (transposed) for dV
//      and dK. One swizzled TMA tile is both, through the descriptor's transpose bit.
//   3. dQ = dS·K needs dS with the queries as M: dSᵀ goes through shared memory (both warpgroups'
//      keys) and is read back transposed (transA). Its fp32 sums go to a workspace by 8-byte
//      atomics; a last kernel scales and rounds them.
//
// Block: 2 warpgroups, a key tile of BLOCK_N = 128 keys (64 per warpgroup: M of Sᵀ, dPᵀ, dV, dK),
// query tiles of BLOCK_M = 64 rows in a ring of STAGES = 2. Per query tile:
//   wait qd_full      Sᵀ = K·Qᵀ, dPᵀ = V·dOᵀ   wgmma m64n64k16 × D/16 each, two groups   [64 keys, 64 queries]
//   Pᵀ = 2^(Sᵀ·σ − LSE₂) while dPᵀ runs, then dSᵀ = Pᵀ∘(dPᵀ − delta)  (the column is the query)
//   dV += Pᵀ·dO, dK += dSᵀ·Q   wgmma m64nDk16 × 4, A from registers                 [64 keys, D]
//   dSᵀ to shared memory; dQ = dS·K   wgmma m64n64k16, A and B transposed from shared memory
//   8-byte atomics of dQ into the fp32 workspace; __syncthreads, thread 0 refills the slot
//
// Build + run:  cmake --build build --target 20_hopper_backward && build/bin/20_hopper_backward
// Read with:    docs/20_hopper_backward.md
// =============================================================================================
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>

#include "check.h"
#include "cp_async.cuh"
#include "hopper.cuh"
#include "launch.h"
#include "mma_sync.cuh"
#include "ops.h"
#include "tensor_map.h"

namespace step19 {
const fa::StepInfo& info();  // the forward of this step (the warp-specialised Hopper forward)
}

namespace step20 {
using namespace fa::ptx;  // step 09's pack; steps 17-19's hopper.cuh

const fa::StepInfo& info();  // bottom of the file: the step's name for messages

constexpr int kWarp = 32, kWarpgroup = 128;
constexpr int kBox = 64;  // dims per TMA box: 64 16-bit elements = 128 bytes, one swizzle row
constexpr float kLog2e = 1.4426950408889634f;

// SPLIT_DIMS (variant "split-dims", d 64 only; d 128 always splits dims): the warpgroups share dQ = dS·K by its
// dims, each N = D/2 over all 128 keys, instead of by its keys, each all D dims over its own 64 keys.
template <int D_, bool SPLIT_DIMS_ = false>
struct Config {
  static constexpr int D = D_, WARPGROUPS = 2, THREADS = WARPGROUPS * kWarpgroup;
  static constexpr bool SPLIT_DIMS = D == 128 || SPLIT_DIMS_;
  static constexpr int DQ_N = SPLIT_DIMS ? D / 2 : D;  // dQ's columns per warpgroup: 64, or 32 (d 64 split)
  static constexpr int BLOCK_N = 64 * WARPGROUPS, BLOCK_M = 64, STAGES = 2, HALVES = D / kBox;
  static constexpr int KV_BYTES = BLOCK_N * D * 2, QD_BYTES = BLOCK_M * D * 2, DS_BYTES = BLOCK_N * BLOCK_M * 2;
  // K, V; Q[STAGES], dO[STAGES]; dSᵀ; LSE₂ and delta [STAGES][BLOCK_M]; barriers; 1024 to align the start.
  static constexpr int SMEM_BYTES = 2 * KV_BYTES + 2 * STAGES * QD_BYTES + DS_BYTES + 2 * STAGES * BLOCK_M * 4 +
                                    8 * (1 + STAGES) + 1024;
  static_assert(D == 64 || D == 128, "head_dim instances 64 and 128");
  static_assert(SMEM_BYTES <= 227 * 1024, "an sm_90 block's shared memory");
};

// ---- new here: wgmma with A read transposed (M contiguous) and B transposed (N contiguous) --------------
// D[64, N] = A·B or D += A·B, A [64, 16] MN-major and B [16, N] MN-major in shared memory: dQ = dS·K with
// dS stored as dSᵀ [keys][queries] and K as [keys][dims]. The two 1s before the closing brace are
// imm-trans-a and imm-trans-b (16-bit types only). N = 32: half a 128-byte swizzle row of K, the descriptor
// starting 64 bytes into it (the swizzle is a function of the address, as a K-major k-step's 32 bytes are).
template <int N, class T>
__device__ __forceinline__ void wgmma_tt(float (&d)[N / 2], std::uint64_t desc_a, std::uint64_t desc_b, int accumulate) {
  static_assert(N == 32 || N == 64, "N = 32 or 64 here");
  constexpr bool kF16 = std::is_same_v<T, __half>;
#define FA_WGMMA_TT(SHAPE, TY, LIST, A, B, S)                                                             \
  "{\n.reg .pred p;\nsetp.ne.b32 p, " S ", 0;\nwgmma.mma_async.sync.aligned." SHAPE ".f32." TY "." TY " {" LIST \
  "}, " A ", " B ", p, 1, 1, 1, 1;\n}\n"
#define FA_WGMMA_P16 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15"
#define FA_WGMMA_D16                                                                                    \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), \
      "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
#define FA_WGMMA_TT_AB "l"(desc_a), "l"(desc_b), "r"(accumulate)
  if constexpr (N == 64 && kF16)
    asm volatile(FA_WGMMA_TT("m64n64k16", "f16", FA_WGMMA_P32, "%32", "%33", "%34") : FA_WGMMA_D32 : FA_WGMMA_TT_AB);
  else if constexpr (N == 64)
    asm volatile(FA_WGMMA_TT("m64n64k16", "bf16", FA_WGMMA_P32, "%32", "%33", "%34") : FA_WGMMA_D32 : FA_WGMMA_TT_AB);
  else if constexpr (kF16)
    asm volatile(FA_WGMMA_TT("m64n32k16", "f16", FA_WGMMA_P16, "%16", "%17", "%18") : FA_WGMMA_D16 : FA_WGMMA_TT_AB);
  else
    asm volatile(FA_WGMMA_TT("m64n32k16", "bf16", FA_WGMMA_P16, "%16", "%17", "%18") : FA_WGMMA_D16 : FA_WGMMA_TT_AB);
#undef FA_WGMMA_TT
#undef FA_WGMMA_P16
#undef FA_WGMMA_D16
#undef FA_WGMMA_TT_AB
}

// ---- kernel 1: delta = rowsum(dO ∘ O) per query row, and the LSE in base 2 ---------------------------------
// One warp per row of [bh·seq_q]; lse2 = LSE·log2 e, or +inf for a row with no visible key (P = 0).
template <class T>
__global__ void preprocess(const T* __restrict__ o, const T* __restrict__ dout, const float* __restrict__ lse,
                           float* __restrict__ delta, float* __restrict__ lse2, long long rows, int head_dim) {
  const long long row = (long long)blockIdx.x * (blockDim.x / kWarp) + threadIdx.x / kWarp;
  if (row >= rows) return;
  const int lane = threadIdx.x % kWarp;
  float sum = 0.f;
  for (int c = lane; c < head_dim; c += kWarp)
    sum += float(o[row * head_dim + c]) * float(dout[row * head_dim + c]);
#pragma unroll
  for (int off = kWarp / 2; off > 0; off /= 2) sum += __shfl_xor_sync(~0u, sum, off);
  if (lane == 0) delta[row] = sum, lse2[row] = lse[row] == -INFINITY ? INFINITY : lse[row] * kLog2e;
}

// ---- kernel 2: one block per (key tile, query head), every query tile that sees it -------------------------
// grid (key tiles, batch·heads); block C::THREADS. The tensor maps describe Q, dO [bh, seq_q, head_dim] in
// boxes of [64, 64] and K, V [batch·kv_heads, seq_k, head_dim] in boxes of [128, 64]. dk, dv: T [bh, seq_k,
// head_dim] when heads_per_kv = 1, else fp32 sums [kv_bh, seq_k, head_dim] (GQA: a K/V head's query heads add).
template <class T, class C>
__global__ void __launch_bounds__(C::THREADS, 1)
    hopper_backward(const __grid_constant__ CUtensorMap tm_q, const __grid_constant__ CUtensorMap tm_k,
                    const __grid_constant__ CUtensorMap tm_v, const __grid_constant__ CUtensorMap tm_do,
                    const float* __restrict__ lse2, const float* __restrict__ delta, float* __restrict__ dq_accum,
                    void* __restrict__ dk_out, void* __restrict__ dv_out, int seq_q, int seq_k, int head_dim,
                    float scale, bool causal, int heads_per_kv) {
  constexpr int D = C::D, BLOCK_M = C::BLOCK_M, BLOCK_N = C::BLOCK_N, STAGES = C::STAGES, HALVES = C::HALVES;
  const float sl2 = scale * kLog2e;
  extern __shared__ uint4 smem_raw[];
  const std::uint32_t raw = smem_addr(smem_raw), base = (raw + 1023) & ~1023u;  // step 17: 1024-aligned tiles
  char* smem = reinterpret_cast<char*>(smem_raw) + (base - raw);
  T* Ks = reinterpret_cast<T*>(smem);                                      // [HALVES][BLOCK_N][64] swizzled
  T* Vs = Ks + BLOCK_N * D;                                                // [HALVES][BLOCK_N][64]
  T* Qs = Vs + BLOCK_N * D;                                                // [STAGES][HALVES][BLOCK_M][64]
  T* dOs = Qs + STAGES * BLOCK_M * D;                                      // [STAGES][HALVES][BLOCK_M][64]
  char* dSt = reinterpret_cast<char*>(dOs + STAGES * BLOCK_M * D);         // [BLOCK_N keys][64 queries] swizzled
  float* lse_s = reinterpret_cast<float*>(dSt + C::DS_BYTES);              // [STAGES][BLOCK_M]
  float* delta_s = lse_s + STAGES * BLOCK_M;                               // [STAGES][BLOCK_M]
  auto* bars = reinterpret_cast<std::uint64_t*>(delta_s + STAGES * BLOCK_M);
  std::uint64_t* kv_full = bars;      // K and V have landed
  std::uint64_t* qd_full = bars + 1;  // [STAGES]: Q and dO of the slot's query tile have landed

  const int n0 = blockIdx.x * BLOCK_N, bh = blockIdx.y, kv_bh = bh / heads_per_kv;
  const int wg = threadIdx.x / kWarpgroup, warp = threadIdx.x % kWarpgroup / kWarp, lane = threadIdx.x % kWarp;
  const int g = lane / 4, q4 = lane % 4;  // accumulator rows g, g+8 of the warp's 16; columns 2·q4, +1
  const int key0 = n0 + 64 * wg + 16 * warp + g;  // this thread's first key (the other: key0 + 8)
  // Causal (top-left): query i sees key j ≤ i, so the tiles before the one holding query n0 see none.
  const int m_begin = causal ? min(n0 / BLOCK_M, (seq_q + BLOCK_M - 1) / BLOCK_M) : 0;
  const int n_iter = (seq_q + BLOCK_M - 1) / BLOCK_M - m_begin;
  lse2 += std::size_t(bh) * seq_q, delta += std::size_t(bh) * seq_q, dq_accum += std::size_t(bh) * seq_q * head_dim;

  auto issue_qd = [&](int it) {  // thread 0: Q and dO of query tile m_begin + it into slot it % STAGES
    const int s = it % STAGES, m0 = (m_begin + it) * BLOCK_M;
    mbarrier_arrive_expect_tx(&qd_full[s], 2 * C::QD_BYTES);
#pragma unroll
    for (int h = 0; h < HALVES; ++h) {
      tma_load_3d(Qs + (s * HALVES + h) * BLOCK_M * kBox, &tm_q, &qd_full[s], h * kBox, m0, bh);
      tma_load_3d(dOs + (s * HALVES + h) * BLOCK_M * kBox, &tm_do, &qd_full[s], h * kBox, m0, bh);
    }
  };
  if (threadIdx.x == 0) {
    mbarrier_init(kv_full, 1);
    for (int s = 0; s < STAGES; ++s) mbarrier_init(&qd_full[s], 1);
    fence_barrier_init();
  }
  __syncthreads();  // the barriers exist before anyone waits on them
  if (threadIdx.x == 0) {
    mbarrier_arrive_expect_tx(kv_full, 2 * C::KV_BYTES);
#pragma unroll
    for (int h = 0; h < HALVES; ++h) {
      tma_load_3d(Ks + h * BLOCK_N * kBox, &tm_k, kv_full, h * kBox, n0, kv_bh);
      tma_load_3d(Vs + h * BLOCK_N * kBox, &tm_v, kv_full, h * kBox, n0, kv_bh);
    }
    for (int it = 0; it < STAGES && it < n_iter; ++it) issue_qd(it);
  }

  // Descriptor start addresses (bytes in shared memory). K-major operands advance 32 bytes per k-step of
  // 16 dims inside a box; MN-major ones 16 rows (2048 bytes) per k-step, their 64-wide boxes LBO apart.
  const std::uint32_t k_addr = smem_addr(Ks), v_addr = smem_addr(Vs), q_addr = smem_addr(Qs);
  const std::uint32_t do_addr = smem_addr(dOs), ds_addr = smem_addr(dSt);
  constexpr std::uint32_t kSbo = 8 * 128;                          // 8 rows of 128 bytes: one swizzle period
  constexpr std::uint32_t kQdLbo = BLOCK_M * 128, kKvLbo = BLOCK_N * 128;  // from dims 0-63 to 64-127

  float dk[D / 2], dv[D / 2];  // [64 keys, D] this warpgroup's sums: register i = key key0 + 8·(i/2 % 2), dim 8·(i/4) + 2·q4 + i % 2
#pragma unroll
  for (int i = 0; i < D / 2; ++i) dk[i] = dv[i] = 0.f;
  mbarrier_wait(kv_full, 0);

  for (int it = 0; it < n_iter; ++it) {
    const int s = it % STAGES, m0 = (m_begin + it) * BLOCK_M;
    if (threadIdx.x < BLOCK_M) {  // this tile's LSE₂ and delta (slot s was last read two tiles ago)
      const int row = m0 + threadIdx.x;
      lse_s[s * BLOCK_M + threadIdx.x] = row < seq_q ? lse2[row] : INFINITY;
      delta_s[s * BLOCK_M + threadIdx.x] = row < seq_q ? delta[row] : 0.f;
    }
    __syncthreads();
    mbarrier_wait(&qd_full[s], it / STAGES & 1);

    // Sᵀ = K·Qᵀ and dPᵀ = V·dOᵀ: both operands K-major (d contiguous), this warpgroup's 64 keys as M.
    float st[32], dpt[32];  // [64 keys, 64 queries]: register i = key key0 + 8·(i/2 % 2), query m0 + 8·(i/4) + 2·q4 + i % 2
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      const std::uint32_t a = k_addr + (kk / 4) * kKvLbo + wg * 64 * 128 + (kk % 4) * 32;
      const std::uint32_t b = q_addr + (s * HALVES + kk / 4) * kQdLbo + (kk % 4) * 32;
      wgmma_ss<64, T>(st, smem_desc(a, 16, kSbo), smem_desc(b, 16, kSbo), kk > 0);
    }
    wgmma_commit();
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      const std::uint32_t a = v_addr + (kk / 4) * kKvLbo + wg * 64 * 128 + (kk % 4) * 32;
      const std::uint32_t b = do_addr + (s * HALVES + kk / 4) * kQdLbo + (kk % 4) * 32;
      wgmma_ss<64, T>(dpt, smem_desc(a, 16, kSbo), smem_desc(b, 16, kSbo), kk > 0);
    }
    wgmma_commit();
    wgmma_wait<1>();  // Sᵀ has landed; dPᵀ may still be on the tensor cores while Pᵀ is computed

    // Pᵀ, zero where the key or the query is out of range or masked; then dSᵀ once dPᵀ has landed.
#pragma unroll
    for (int i = 0; i < 32; ++i) {
      const int key = key0 + 8 * (i / 2 % 2), q = 8 * (i / 4) + 2 * q4 + i % 2;
      const bool live = key < seq_k && m0 + q < seq_q && !(causal && key > m0 + q);
      st[i] = live ? exp2f(st[i] * sl2 - lse_s[s * BLOCK_M + q]) : 0.f;
    }
    std::uint32_t pt[4][4], dst[4][4];  // per k-step of 16 queries: step 17's accumulator-to-A relayout
#pragma unroll
    for (int kk = 0; kk < 4; ++kk)
#pragma unroll
      for (int e = 0; e < 4; ++e) pt[kk][e] = pack<T>(st[8 * kk + 2 * e], st[8 * kk + 2 * e + 1]);
    wgmma_wait<0>();
    // dSᵀ = Pᵀ∘(dPᵀ − delta) with P as rounded for dV (as step 16 has it), in fp32, then rounded itself.
#pragma unroll
    for (int kk = 0; kk < 4; ++kk)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int i = 8 * kk + 2 * e, q = 8 * (i / 4) + 2 * q4;
        const float2 p = unpack<T>(pt[kk][e]);
        dst[kk][e] = pack<T>(p.x * (dpt[i] - delta_s[s * BLOCK_M + q]), p.y * (dpt[i + 1] - delta_s[s * BLOCK_M + q + 1]));
      }
    // dSᵀ [keys][queries] into shared memory with the 128-byte swizzle (16-byte chunk c of row r at c ^ r % 8),
    // as a TMA box of [BLOCK_N, 64] would hold it: a thread's two neighbouring queries are one 4-byte store.
#pragma unroll
    for (int i = 0; i < 32; i += 2) {
      const int r = 64 * wg + 16 * warp + g + 8 * (i / 2 % 2), q = 8 * (i / 4) + 2 * q4;
      *reinterpret_cast<std::uint32_t*>(dSt + r * 128 + ((q / 8) ^ (r % 8)) * 16 + (q % 8) * 2) = dst[i / 8][i % 8 / 2];
    }

    // dV += Pᵀ·dO and dK += dSᵀ·Q: A from registers, B (dO, Q) read transposed (queries × dims, dims contiguous).
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      const std::uint32_t off = s * HALVES * kQdLbo + kk * 16 * 128;
      wgmma_rs<D, T>(dv, pt[kk], smem_desc(do_addr + off, kQdLbo, kSbo), 1);
      wgmma_rs<D, T>(dk, dst[kk], smem_desc(q_addr + off, kQdLbo, kSbo), 1);
    }
    wgmma_commit();
    fence_proxy_async();  // dSᵀ written by this thread, before the async proxy (wgmma) reads it
    __syncthreads();      // both warpgroups' keys of dSᵀ are there

    // dQ = dS·K [64 queries, DQ_N dims] per warpgroup. Split by dims (d 128; d 64 "split-dims"): warpgroup w
    // takes dims DQ_N·w.. over all 128 keys. Split by keys (d 64): all 64 dims over its own 64 keys, the two
    // halves adding in the workspace (twice the atomics).
    constexpr int DQ_N = C::DQ_N, DQ_KSTEPS = C::SPLIT_DIMS ? BLOCK_N / 16 : 4;
    float dq[DQ_N / 2];  // register i = query m0 + 16·warp + g + 8·(i/2 % 2), dim dq_col + 8·(i/4) + 2·q4 + i % 2
    const std::uint32_t dq_a = ds_addr + (C::SPLIT_DIMS ? 0 : wg * 64 * 128);
    const std::uint32_t dq_b = k_addr + (D == 128 ? wg * kKvLbo : C::SPLIT_DIMS ? wg * DQ_N * 2 : wg * 64 * 128);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < DQ_KSTEPS; ++kk)
      wgmma_tt<DQ_N, T>(dq, smem_desc(dq_a + kk * 2048, kKvLbo, kSbo), smem_desc(dq_b + kk * 2048, kKvLbo, kSbo),
                        kk > 0);
    wgmma_commit();
    wgmma_wait<0>();  // dV, dK and dQ done: Q, dO and dSᵀ may be overwritten after the barrier below
    const int dq_col = C::SPLIT_DIMS ? DQ_N * wg : 0;
#pragma unroll
    for (int i = 0; i < DQ_N / 2; i += 2) {
      const int row = m0 + 16 * warp + g + 8 * (i / 2 % 2), col = dq_col + 8 * (i / 4) + 2 * q4;
      if (row < seq_q && col < head_dim)
        atomicAdd(reinterpret_cast<float2*>(dq_accum + std::size_t(row) * head_dim + col), make_float2(dq[i], dq[i + 1]));
    }
    __syncthreads();  // every thread is done with slot s and with dSᵀ
    if (threadIdx.x == 0 && it + STAGES < n_iter) issue_qd(it + STAGES);
  }

  // dK (scaled) and dV of this warpgroup's 64 keys: rounded to T (MHA), or added in fp32 (GQA).
#pragma unroll
  for (int i = 0; i < D / 2; i += 2) {
    const int key = key0 + 8 * (i / 2 % 2), col = 8 * (i / 4) + 2 * q4;
    if (key >= seq_k || col >= head_dim) continue;
    if (heads_per_kv == 1) {
      const std::size_t at = (std::size_t(bh) * seq_k + key) * head_dim + col;
      *reinterpret_cast<std::uint32_t*>(static_cast<T*>(dk_out) + at) = pack<T>(dk[i] * scale, dk[i + 1] * scale);
      *reinterpret_cast<std::uint32_t*>(static_cast<T*>(dv_out) + at) = pack<T>(dv[i], dv[i + 1]);
    } else {
      const std::size_t at = (std::size_t(kv_bh) * seq_k + key) * head_dim + col;
      atomicAdd(reinterpret_cast<float2*>(static_cast<float*>(dk_out) + at), make_float2(dk[i] * scale, dk[i + 1] * scale));
      atomicAdd(reinterpret_cast<float2*>(static_cast<float*>(dv_out) + at), make_float2(dv[i], dv[i + 1]));
    }
  }
}

// ---- kernel 3: fp32 sums to T, scaled: dQ (scale), and with GQA dK (already scaled) and dV ----------------
template <class T>
__global__ void round_to(const float* __restrict__ from, T* __restrict__ to, long long n, float scale) {
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
    to[i] = T(from[i] * scale);
}

// ---- launcher --------------------------------------------------------------------------------------------
// Workspace (fp32): dQ_accum [bh, seq_q, head_dim], delta and LSE₂ [bh, seq_q]; with GQA also dK and dV sums
// [kv_bh, seq_k, head_dim]. Each part starts 256-byte aligned.
struct Workspace {
  std::size_t dq, delta, lse2, dk, dv, total;
  static Workspace of(const fa::AttnParams& p) {
    const std::size_t bh = std::size_t(p.batch) * p.heads, kv_bh = std::size_t(p.batch) * fa::kv_heads_of(p);
    const bool gqa = kv_bh != bh;
    auto up = [](std::size_t b) { return (b + 255) / 256 * 256; };
    Workspace w{};
    w.dq = 0;
    w.delta = up(bh * p.seq_q * p.head_dim * 4);
    w.lse2 = w.delta + up(bh * p.seq_q * 4);
    w.dk = w.lse2 + up(bh * p.seq_q * 4);
    w.dv = w.dk + (gqa ? up(kv_bh * p.seq_k * p.head_dim * 4) : 0);
    w.total = w.dv + (gqa ? up(kv_bh * p.seq_k * p.head_dim * 4) : 0);
    return w;
  }
};
std::size_t bwd_workspace(const fa::AttnParams& p) { return Workspace::of(p).total; }

template <class T, class C>
void launch(const fa::AttnBwdArgs& a, cudaStream_t stream) {
  static const bool ready = [] {
    fa::opt_in_shared_memory(hopper_backward<T, C>, C::SMEM_BYTES, info().name);
    return true;
  }();
  (void)ready;
  const fa::AttnParams& p = a.p;
  const long long bh = (long long)p.batch * p.heads, kv_bh = (long long)p.batch * fa::kv_heads_of(p);
  const int heads_per_kv = p.heads / fa::kv_heads_of(p);
  const char* name = info().name;
  const Workspace w = Workspace::of(p);
  char* ws = static_cast<char*>(a.workspace);
  if (!ws) throw fa::UsageError(std::string(name) + ": needs its workspace (" + info().workspace_note + ")");
  float *dq_accum = reinterpret_cast<float*>(ws + w.dq), *delta = reinterpret_cast<float*>(ws + w.delta);
  float *lse2 = reinterpret_cast<float*>(ws + w.lse2), *dk_sum = reinterpret_cast<float*>(ws + w.dk);
  float* dv_sum = reinterpret_cast<float*>(ws + w.dv);
  const CUtensorMap tm_q = fa::tensor_map_16bit_3d(a.q, p.dtype, bh, p.seq_q, p.head_dim, C::BLOCK_M, kBox, name, "Q");
  const CUtensorMap tm_do = fa::tensor_map_16bit_3d(a.dout, p.dtype, bh, p.seq_q, p.head_dim, C::BLOCK_M, kBox, name, "dO");
  const CUtensorMap tm_k = fa::tensor_map_16bit_3d(a.k, p.dtype, kv_bh, p.seq_k, p.head_dim, C::BLOCK_N, kBox, name, "K");
  const CUtensorMap tm_v = fa::tensor_map_16bit_3d(a.v, p.dtype, kv_bh, p.seq_k, p.head_dim, C::BLOCK_N, kBox, name, "V");
  FA_CUDA_CHECK(cudaMemsetAsync(dq_accum, 0, w.delta - w.dq, stream));
  if (heads_per_kv > 1) FA_CUDA_CHECK(cudaMemsetAsync(ws + w.dk, 0, w.total - w.dk, stream));
  const long long rows = bh * p.seq_q;
  if (rows > 0)
    preprocess<T><<<unsigned((rows + 7) / 8), 256, 0, stream>>>(static_cast<const T*>(a.o), static_cast<const T*>(a.dout),
                                                                 a.lse, delta, lse2, rows, p.head_dim);
  FA_CHECK_LAUNCH();
  const dim3 grid(unsigned((p.seq_k + C::BLOCK_N - 1) / C::BLOCK_N), unsigned(bh));
  void* dk_out = heads_per_kv > 1 ? static_cast<void*>(dk_sum) : a.dk;
  void* dv_out = heads_per_kv > 1 ? static_cast<void*>(dv_sum) : a.dv;
  if (grid.x > 0)
    hopper_backward<T, C><<<grid, C::THREADS, C::SMEM_BYTES, stream>>>(tm_q, tm_k, tm_v, tm_do, lse2, delta, dq_accum,
                                                                       dk_out, dv_out, p.seq_q, p.seq_k, p.head_dim,
                                                                       p.scale, p.causal, heads_per_kv);
  FA_CHECK_LAUNCH();
  auto round_sums = [&](const float* from, void* to, long long n, float scale) {
    if (n > 0)
      round_to<T><<<unsigned(std::min<long long>((n + 255) / 256, 4096)), 256, 0, stream>>>(from, static_cast<T*>(to), n,
                                                                                              scale);
    FA_CHECK_LAUNCH();
  };
  round_sums(dq_accum, a.dq, rows * p.head_dim, p.scale);
  if (heads_per_kv > 1) {
    round_sums(dk_sum, a.dk, kv_bh * p.seq_k * p.head_dim, 1.f);
    round_sums(dv_sum, a.dv, kv_bh * p.seq_k * p.head_dim, 1.f);
  }
}

template <class T>
void launch_dim(const fa::AttnBwdArgs& a, cudaStream_t stream) {
  if (a.p.variant < 0 || a.p.variant > 1)
    throw fa::UsageError(std::string(info().name) + ": no variant " + std::to_string(a.p.variant));
  if (a.p.head_dim > 64)
    launch<T, Config<128>>(a, stream);
  else if (a.p.variant == 1)
    launch<T, Config<64, true>>(a, stream);
  else
    launch<T, Config<64>>(a, stream);
}

void backward(const fa::AttnBwdArgs& a, cudaStream_t stream) {
  fa::check_attention_launch(info(), a.p, {a.q, a.k, a.v, a.o, a.dout, a.dq, a.dk, a.dv}, "Q, K, V, O, dO, dQ, dK and dV");
  if (a.p.dtype == fa::DType::F16)
    launch_dim<__half>(a, stream);
  else
    launch_dim<__nv_bfloat16>(a, stream);
}

// The FlashAttention-2 benchmark shape at seq 2048, head_dim 64 (batch 8, 32 heads), fp16, fwd + bwd (step 16's).
fa::Problem default_problem() {
  fa::Problem p = fa::fa2_problem(2048, 64, /*causal=*/false, fa::DType::F16);
  p.backward = true;
  return p;
}

const fa::StepInfo& info() {
  static const fa::StepInfo i = [] {
    fa::StepInfo s{"20_hopper_backward",
                   "the Hopper backward: Q and dO tiles by TMA, the five products on wgmma, Sᵀ and dPᵀ with the keys as M "
                   "(sm_90a)",
                   fa::Family::Attention};
    s.attn_fwd = step19::info().attn_fwd;
    s.attn_bwd = backward;
    s.attn_rule = {{fa::DType::F16, fa::DType::BF16}, 128, 8};
    s.attn_rule.positive_scale = true;  // step 19's forward takes the row max on unscaled scores
    s.attn_rule.gqa = true;             // dK, dV of a K/V head summed over its query heads (fp32 sums)
    // dQ by fp32 atomics (no deterministic order yet); "split-dims": at d 64 the warpgroups split dQ by dims
    s.variants = {"atomic", "split-dims"};
    s.fwd_workspace_bytes = step19::info().fwd_workspace_bytes;  // with the forward, its tile counter
    s.bwd_workspace_bytes = bwd_workspace;
    s.workspace_note =
        "forward: step 19's tile counter; backward: dQ_accum, batch·heads·seq_q·head_dim fp32, delta and LSE₂, batch·heads·seq_q fp32 each; with GQA also dK "
        "and dV sums, batch·kv_heads·seq_k·head_dim fp32 each";
    s.default_problem = default_problem;
    s.needs_cc = 90;
    return s;
  }();
  return i;
}

}  // namespace step20
