// =============================================================================================
// FlashAttention from scratch, step by step, in CUDA C++
// Step 24: query tiles of 128 at d = 64: each consumer owns half the queries of dQ, not half its dims
//
// What changes since step 21: the tile. At d = 64 the products of a (128 keys × 64 queries) tile are short
// and the chain around them is not: the tile's barrier, the exponentials of both consumers at once, the
// pipe drained before the next tile. A tile of 128 queries pays that chain once for twice the products.
//   1. Q and dO come in slots of 128 rows; Sᵀ and dPᵀ are [64 keys, 128 queries] per consumer (N = 128), and
//      dV, dK take eight k-steps of 16 queries instead of four.
//   2. dSᵀ is [128 keys][128 queries]: two 64-query boxes side by side, each one 128-byte swizzle row wide.
//   3. dQ = dS·K: consumer c takes queries 64·c .. 64·c + 63 over all keys and all dims (one m64n64 per k-step),
//      where step 21 split the dims; its staging part and its block of dQ_accum are [64 queries, 64 dims].
// d = 128 keeps step 21's tile (Sᵀ and dPᵀ of 128 queries would need 256 registers on their own): this step
// runs step 21's backward there. Variants as in step 21: "no-writer", "deterministic".
//
// Per query tile, each consumer (c: this warpgroup's 64 keys, and its 64 queries of dQ):
//   wait qd_full[s]   Sᵀ = K_c·Qᵀ, dPᵀ = V_c·dOᵀ [64, 128]   Pᵀ under dPᵀ, then dSᵀ          (step 21)
//   dV += Pᵀ·dO, dK += dSᵀ·Q (8 k-steps); dSᵀ into buffer it % 2; fence; named barrier (both consumers)
//   dQ_c = dS[64·c .., all keys]·K [64, 64]; wait; hand slot s back; staging c as in step 21
//
// Build + run:  cmake --build build --target 24_hopper_backward_wide_tiles && build/bin/24_hopper_backward_wide_tiles
// Read with:    docs/24_hopper_backward_wide_tiles.md
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
#include "hopper.cuh"
#include "hopper_backward.cuh"
#include "launch.h"
#include "mma_sync.cuh"
#include "ops.h"
#include "tensor_map.h"

namespace step19 {
const fa::StepInfo& info();  // the forward of this step (the warp-specialised Hopper forward)
}
namespace step21 {
const fa::StepInfo& info();  // the backward at d > 64 (this step's BASE, unchanged there)
}

namespace step24 {
using namespace fa::ptx;  // step 09's pack, unpack; hopper.cuh; hopper_backward.cuh (steps 16, 20, 21)

const fa::StepInfo& info();  // bottom of the file: the step's name for messages

constexpr int kWarp = 32, kWarpgroup = 128;
constexpr int kBox = 64;  // dims per TMA box: 64 16-bit elements = 128 bytes, one swizzle row
constexpr float kLog2e = 1.4426950408889634f;
// Named barriers (0 is __syncthreads): both consumers' dSᵀ are in; staging c is full / free.
constexpr int kBarDs = 1, kBarDqFull = 2, kBarDqEmpty = 4;
constexpr int kStagingThreads = kWarpgroup + kWarp;  // a consumer and the writer warp meet there

template <int D_, bool WRITER_ = true, bool DETERMINISTIC_ = false>
struct Config {
  static constexpr int D = D_, CONSUMERS = 2, THREADS = (CONSUMERS + 1) * kWarpgroup;
  static constexpr int BLOCK_N = 64 * CONSUMERS, BLOCK_M = 128, STAGES = 2, HALVES = D / kBox;
  static constexpr bool WRITER = WRITER_, DETERMINISTIC = DETERMINISTIC_;
  static constexpr int DQ_ROWS = BLOCK_M / CONSUMERS, DQ_N = D;  // dQ per consumer: its 64 queries, all dims
  // setmaxnreg moves registers inside the block's allocation at entry, 168 · 384 (the launch bounds'
  // cap), never beyond it: 128·24 + 256·240 fills it exactly (step 19's d = 128 split). Asking for more
  // makes setmaxnreg.inc wait forever for registers no warp will release.
  static constexpr int PRODUCER_REGS = 24, CONSUMER_REGS = 240;
  static constexpr int ENTRY_REGS = 65536 / THREADS / 8 * 8;
  static_assert(kWarpgroup * (PRODUCER_REGS + CONSUMERS * CONSUMER_REGS) <= ENTRY_REGS * THREADS,
                "setmaxnreg: more registers than the block holds at entry (a hang, not an error)");
  static constexpr int KV_BYTES = BLOCK_N * D * 2, QD_BYTES = BLOCK_M * D * 2, DS_BYTES = BLOCK_N * BLOCK_M * 2;
  static constexpr int DQ_BYTES = DQ_ROWS * DQ_N * 4;  // one consumer's staging: [64, 64] fp32
  // K, V; Q[STAGES], dO[STAGES]; dSᵀ[2]; staging[CONSUMERS]; LSE₂ and delta [STAGES][BLOCK_M]; barriers; 1024.
  static constexpr int SMEM_BYTES = 2 * KV_BYTES + 2 * STAGES * QD_BYTES + 2 * DS_BYTES + CONSUMERS * DQ_BYTES +
                                    2 * STAGES * BLOCK_M * 4 + 8 * (1 + 2 * STAGES) + 1024;
  static_assert(D == 64, "d = 64 only: Sᵀ and dPᵀ of 128 queries fill 128 registers, dK and dV another 2·D/2");
  static_assert(SMEM_BYTES <= 227 * 1024, "an sm_90 block's shared memory");
};

// ---- kernel 1: delta = rowsum(dO ∘ O) per query row, and the LSE in base 2 (step 20's) ---------------------
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

// dQ_accum in fragment order: per (head, query tile, consumer c) a block of [64, DQ_N] fp32, float4 slot
// (j·4 + warp)·32 + lane holding rows 64·c + 16·warp + g and + 8 of the tile, columns 8·j + 2·q4 and + 1.
template <class C>
__device__ __forceinline__ float* dq_part(float* dq_accum, int bh, int n_mt, int mt, int c) {
  return dq_accum + ((std::size_t(bh) * n_mt + mt) * C::CONSUMERS + c) * (C::DQ_ROWS * C::DQ_N);
}

// ---- the producer: warp 0, Q and dO by TMA, LSE₂ and delta by its 32 lanes ----------------------------------
// Slot it % STAGES, its (it / STAGES)-th fill; an empty barrier is waited on with the opposite parity (a
// fresh barrier's "previous" phase counts as complete, step 18). qd_full takes 32 arrivals: each lane's,
// after its LSE₂ and delta stores (an arrival releases its own thread's writes); lane 0's also expects the
// TMA bytes, before it issues the copies.
template <class T, class C>
__device__ __forceinline__ void produce(const CUtensorMap& tm_q, const CUtensorMap& tm_do, T* Qs, T* dOs,
                                        float* lse_s, float* delta_s, std::uint64_t* qd_full, std::uint64_t* qd_empty,
                                        const float* lse2, const float* delta, int seq_q, int m_begin, int n_iter,
                                        int bh) {
  constexpr int BLOCK_M = C::BLOCK_M, STAGES = C::STAGES, HALVES = C::HALVES;
  const int lane = threadIdx.x % kWarp;
  for (int it = 0; it < n_iter; ++it) {
    const int s = it % STAGES, m0 = (m_begin + it) * BLOCK_M;
    mbarrier_wait(&qd_empty[s], (it / STAGES & 1) ^ 1);
#pragma unroll
    for (int r = lane; r < BLOCK_M; r += kWarp) {
      lse_s[s * BLOCK_M + r] = m0 + r < seq_q ? lse2[m0 + r] : INFINITY;  // +inf: P = 0 past seq_q
      delta_s[s * BLOCK_M + r] = m0 + r < seq_q ? delta[m0 + r] : 0.f;
    }
    if (lane != 0) {
      mbarrier_arrive(&qd_full[s]);
      continue;
    }
    mbarrier_arrive_expect_tx(&qd_full[s], 2 * C::QD_BYTES);
#pragma unroll
    for (int h = 0; h < HALVES; ++h) {
      tma_load_3d(Qs + (s * HALVES + h) * BLOCK_M * kBox, &tm_q, &qd_full[s], h * kBox, m0, bh);
      tma_load_3d(dOs + (s * HALVES + h) * BLOCK_M * kBox, &tm_do, &qd_full[s], h * kBox, m0, bh);
    }
  }
}

// ---- the dQ writer: warp 1, one bulk reduction per consumer and query tile ----------------------------------
// Staging c is full (barrier kBarDqFull + c: the consumer's 128 arrivals and this warp's 32) -> lane 0 adds
// it to its block of dQ_accum -> once the engine has read it, the staging is free again (kBarDqEmpty + c).
// The first "free" is given at the start; none after the last tile, so that no arrival is left pending.
// DETERMINISTIC: the key blocks that visit tile m add in a fixed order, counted in turns[m]: ascending, or
// descending when causal (the block with the most keys past the diagonal reaches the tile first, and is
// launched first); a block adds on its turn, waits until its additions are done, then counts.
template <class C>
__device__ __forceinline__ void write_dq(const float* staging, float* dq_accum, unsigned* turns, int bh, int n_mt,
                                         int m_begin, int n_iter, int kb, bool causal) {
  const int lane = threadIdx.x % kWarp;
  if (n_iter == 0) return;
  for (int c = 0; c < C::CONSUMERS; ++c) named_barrier_arrive(kBarDqEmpty + c, kStagingThreads);
  for (int it = 0; it < n_iter; ++it) {
    const int m = m_begin + it;
    for (int c = 0; c < C::CONSUMERS; ++c) named_barrier_sync(kBarDqFull + c, kStagingThreads);
    if (lane == 0) {
      if constexpr (C::DETERMINISTIC) {
        const int last = min(int(gridDim.x) - 1, (m * C::BLOCK_M + C::BLOCK_M - 1) / C::BLOCK_N);  // of the visitors
        const unsigned mine = unsigned(causal ? last - kb : kb);
        for (unsigned polls = 0; ld_acquire(turns + m) != mine;)
          if (++polls == 1u << 26) __trap();  // seconds: a wrong order would hang the GPU; fail instead
        fence_proxy_async_global();
      }
      for (int c = 0; c < C::CONSUMERS; ++c)
        bulk_reduce_add(dq_part<C>(dq_accum, bh, n_mt, m, c), smem_addr(staging + c * C::DQ_ROWS * C::DQ_N), C::DQ_BYTES);
      bulk_commit();
      if constexpr (C::DETERMINISTIC) {
        bulk_wait();
        fence_proxy_async_global();
        add_release(turns + m, 1);
      } else {
        bulk_wait_read();
      }
    }
    __syncwarp();
    if (it + 1 < n_iter)
      for (int c = 0; c < C::CONSUMERS; ++c) named_barrier_arrive(kBarDqEmpty + c, kStagingThreads);
  }
  if (lane == 0) bulk_wait();  // the additions themselves done before the block retires
}

// ---- kernel 2: one block per (key tile, query head), every query tile that sees it -------------------------
// grid (key tiles, batch·heads); block C::THREADS: warpgroup 0 the producer (warp 0) and the dQ writer
// (warp 1), warpgroups 1 and 2 the consumers. Tensor maps, dk_out and dv_out as in step 20.
template <class T, class C>
__global__ void __launch_bounds__(C::THREADS, 1)  // the 1: a register cap at entry, which setmaxnreg needs
    hopper_backward_ws(const __grid_constant__ CUtensorMap tm_q, const __grid_constant__ CUtensorMap tm_k,
                       const __grid_constant__ CUtensorMap tm_v, const __grid_constant__ CUtensorMap tm_do,
                       const float* __restrict__ lse2, const float* __restrict__ delta, float* __restrict__ dq_accum,
                       unsigned* __restrict__ turns, void* __restrict__ dk_out, void* __restrict__ dv_out, int seq_q,
                       int seq_k, int head_dim, float scale, bool causal, int heads_per_kv) {
  constexpr int D = C::D, BLOCK_M = C::BLOCK_M, BLOCK_N = C::BLOCK_N, STAGES = C::STAGES, HALVES = C::HALVES;
  constexpr int DQ_N = C::DQ_N;
  extern __shared__ uint4 smem_raw[];
  const std::uint32_t raw = smem_addr(smem_raw), base = (raw + 1023) & ~1023u;  // step 17: 1024-aligned tiles
  char* smem = reinterpret_cast<char*>(smem_raw) + (base - raw);
  T* Ks = reinterpret_cast<T*>(smem);                                      // [HALVES][BLOCK_N][64] swizzled
  T* Vs = Ks + BLOCK_N * D;                                                // [HALVES][BLOCK_N][64]
  T* Qs = Vs + BLOCK_N * D;                                                // [STAGES][HALVES][BLOCK_M][64]
  T* dOs = Qs + STAGES * BLOCK_M * D;                                      // [STAGES][HALVES][BLOCK_M][64]
  char* dSt = reinterpret_cast<char*>(dOs + STAGES * BLOCK_M * D);  // [2][BLOCK_M/64][BLOCK_N keys][64 queries] swizzled
  float* staging = reinterpret_cast<float*>(dSt + 2 * C::DS_BYTES);  // [CONSUMERS][64·DQ_N] fragment order
  float* lse_s = staging + C::CONSUMERS * C::DQ_ROWS * DQ_N;         // [STAGES][BLOCK_M]
  float* delta_s = lse_s + STAGES * BLOCK_M;                               // [STAGES][BLOCK_M]
  auto* bars = reinterpret_cast<std::uint64_t*>(delta_s + STAGES * BLOCK_M);
  std::uint64_t* kv_full = bars;      // K and V have landed
  std::uint64_t* qd_full = bars + 1;  // [STAGES]: the slot's Q, dO (TMA), LSE₂ and delta (stores) are in
  std::uint64_t* qd_empty = qd_full + STAGES;  // [STAGES]: every consumer thread is done with the slot

  // Deterministic and causal: key tiles launched last first (write_dq's order).
  const int kb = C::DETERMINISTIC && causal ? int(gridDim.x) - 1 - int(blockIdx.x) : int(blockIdx.x);
  const int n0 = kb * BLOCK_N, bh = blockIdx.y, kv_bh = bh / heads_per_kv;
  const int n_mt = (seq_q + BLOCK_M - 1) / BLOCK_M;
  // Causal (top-left): query i sees key j ≤ i, so the tiles before the one holding query n0 see none.
  const int m_begin = causal ? min(n0 / BLOCK_M, (seq_q + BLOCK_M - 1) / BLOCK_M) : 0;
  const int n_iter = (seq_q + BLOCK_M - 1) / BLOCK_M - m_begin;
  lse2 += std::size_t(bh) * seq_q, delta += std::size_t(bh) * seq_q;

  if (threadIdx.x == 0) {
    mbarrier_init(kv_full, 1);
    for (int s = 0; s < STAGES; ++s) mbarrier_init(&qd_full[s], kWarp), mbarrier_init(&qd_empty[s], C::CONSUMERS * kWarpgroup);
    fence_barrier_init();
  }
  __syncthreads();  // the barriers exist before anyone waits on them; the last block-wide barrier

  // ---- warpgroup 0: it hands its registers over; warp 0 copies (K and V once, then produce), warp 1 writes dQ
  if (threadIdx.x < kWarpgroup) {
    setmaxnreg_dec<C::PRODUCER_REGS>();
    const int warp = threadIdx.x / kWarp;
    if (warp == 0) {
      if (threadIdx.x == 0) {
        mbarrier_arrive_expect_tx(kv_full, 2 * C::KV_BYTES);
#pragma unroll
        for (int h = 0; h < HALVES; ++h) {
          tma_load_3d(Ks + h * BLOCK_N * kBox, &tm_k, kv_full, h * kBox, n0, kv_bh);
          tma_load_3d(Vs + h * BLOCK_N * kBox, &tm_v, kv_full, h * kBox, n0, kv_bh);
        }
      }
      produce<T, C>(tm_q, tm_do, Qs, dOs, lse_s, delta_s, qd_full, qd_empty, lse2, delta, seq_q, m_begin, n_iter, bh);
    } else if (warp == 1 && C::WRITER) {
      write_dq<C>(staging, dq_accum, turns + std::size_t(bh) * n_mt, bh, n_mt, m_begin, n_iter, kb, causal);
    }
    return;
  }

  // ---- the consumers: warpgroups 1 and 2, 64 keys each --------------------------------------------------------
  setmaxnreg_inc<C::CONSUMER_REGS>();
  const float sl2 = scale * kLog2e;
  const int wg = threadIdx.x / kWarpgroup - 1, warp = threadIdx.x % kWarpgroup / kWarp, lane = threadIdx.x % kWarp;
  const int g = lane / 4, q4 = lane % 4;  // accumulator rows g, g+8 of the warp's 16; columns 2·q4, +1
  const int key0 = n0 + 64 * wg + 16 * warp + g;  // this thread's first key (the other: key0 + 8)

  // Descriptor start addresses (bytes in shared memory). K-major operands advance 32 bytes per k-step of
  // 16 dims inside a box; MN-major ones 16 rows (2048 bytes) per k-step, their 64-wide boxes LBO apart.
  const std::uint32_t k_addr = smem_addr(Ks), v_addr = smem_addr(Vs), q_addr = smem_addr(Qs);
  const std::uint32_t do_addr = smem_addr(dOs), ds_addr = smem_addr(dSt);
  constexpr std::uint32_t kSbo = 8 * 128;                          // 8 rows of 128 bytes: one swizzle period
  constexpr std::uint32_t kQdLbo = BLOCK_M * 128, kKvLbo = BLOCK_N * 128;  // from dims 0-63 to 64-127
  constexpr std::uint32_t kDsBox = BLOCK_N * 128;  // dSᵀ: from queries 0-63 to 64-127
  constexpr int M_STEPS = BLOCK_M / 16;             // k-steps of 16 queries in dV and dK
  float4* my_staging = reinterpret_cast<float4*>(staging) + wg * C::DQ_ROWS * DQ_N / 4;

  float dk[D / 2], dv[D / 2];  // [64 keys, D] this warpgroup's sums: register i = key key0 + 8·(i/2 % 2), dim 8·(i/4) + 2·q4 + i % 2
#pragma unroll
  for (int i = 0; i < D / 2; ++i) dk[i] = dv[i] = 0.f;
  mbarrier_wait(kv_full, 0);

  for (int it = 0; it < n_iter; ++it) {
    const int s = it % STAGES, m0 = (m_begin + it) * BLOCK_M;
    mbarrier_wait(&qd_full[s], it / STAGES & 1);

    // Sᵀ = K·Qᵀ and dPᵀ = V·dOᵀ: both operands K-major (d contiguous), this warpgroup's 64 keys as M.
    float st[BLOCK_M / 2], dpt[BLOCK_M / 2];  // [64 keys, 128 queries]: register i = key key0 + 8·(i/2 % 2),
                                              // query m0 + 8·(i/4) + 2·q4 + i % 2
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      const std::uint32_t a = k_addr + (kk / 4) * kKvLbo + wg * 64 * 128 + (kk % 4) * 32;
      const std::uint32_t b = q_addr + (s * HALVES + kk / 4) * kQdLbo + (kk % 4) * 32;
      wgmma_ss<BLOCK_M, T>(st, smem_desc(a, 16, kSbo), smem_desc(b, 16, kSbo), kk > 0);  // N = 128 queries
    }
    wgmma_commit();
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      const std::uint32_t a = v_addr + (kk / 4) * kKvLbo + wg * 64 * 128 + (kk % 4) * 32;
      const std::uint32_t b = do_addr + (s * HALVES + kk / 4) * kQdLbo + (kk % 4) * 32;
      wgmma_ss<BLOCK_M, T>(dpt, smem_desc(a, 16, kSbo), smem_desc(b, 16, kSbo), kk > 0);
    }
    wgmma_commit();
    wgmma_wait<1>();  // Sᵀ has landed; dPᵀ may still be on the tensor cores while Pᵀ is computed

    // Pᵀ, zero where the key or the query is out of range or masked; then dSᵀ once dPᵀ has landed.
#pragma unroll
    for (int i = 0; i < BLOCK_M / 2; ++i) {
      const int key = key0 + 8 * (i / 2 % 2), q = 8 * (i / 4) + 2 * q4 + i % 2;
      const bool live = key < seq_k && m0 + q < seq_q && !(causal && key > m0 + q);
      st[i] = live ? exp2f(st[i] * sl2 - lse_s[s * BLOCK_M + q]) : 0.f;
    }
    std::uint32_t pt[M_STEPS][4], dst[M_STEPS][4];  // per k-step of 16 queries: step 17's accumulator-to-A relayout
#pragma unroll
    for (int kk = 0; kk < M_STEPS; ++kk)
#pragma unroll
      for (int e = 0; e < 4; ++e) pt[kk][e] = pack<T>(st[8 * kk + 2 * e], st[8 * kk + 2 * e + 1]);
    wgmma_wait<0>();
    // dSᵀ = Pᵀ∘(dPᵀ − delta) with P as rounded for dV (as step 16 has it), in fp32, then rounded itself.
#pragma unroll
    for (int kk = 0; kk < M_STEPS; ++kk)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int i = 8 * kk + 2 * e, q = 8 * (i / 4) + 2 * q4;
        const float2 p = unpack<T>(pt[kk][e]);
        dst[kk][e] = pack<T>(p.x * (dpt[i] - delta_s[s * BLOCK_M + q]), p.y * (dpt[i + 1] - delta_s[s * BLOCK_M + q + 1]));
      }
    // dSᵀ [keys][queries] into buffer it % 2 with the 128-byte swizzle (step 20), queries 64·b .. in box b (one
    // swizzle row holds 64). Two buffers: the other consumer may still be reading the previous tile's.
    char* ds_buf = dSt + (it % 2) * C::DS_BYTES;
#pragma unroll
    for (int i = 0; i < BLOCK_M / 2; i += 2) {
      const int r = 64 * wg + 16 * warp + g + 8 * (i / 2 % 2), q = 8 * (i / 4) % 64 + 2 * q4;
      *reinterpret_cast<std::uint32_t*>(ds_buf + i / 32 * kDsBox + r * 128 + ((q / 8) ^ (r % 8)) * 16 + (q % 8) * 2) =
          dst[i / 8][i % 8 / 2];
    }

    // dV += Pᵀ·dO and dK += dSᵀ·Q: A from registers, B (dO, Q) read transposed (queries × dims, dims contiguous).
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < M_STEPS; ++kk) {
      const std::uint32_t off = s * HALVES * kQdLbo + kk * 16 * 128;
      wgmma_rs<D, T>(dv, pt[kk], smem_desc(do_addr + off, kQdLbo, kSbo), 1);
      wgmma_rs<D, T>(dk, dst[kk], smem_desc(q_addr + off, kQdLbo, kSbo), 1);
    }
    wgmma_commit();
    fence_proxy_async();  // dSᵀ written by this thread, before the async proxy (wgmma) reads it
    named_barrier_sync(kBarDs, C::CONSUMERS * kWarpgroup);  // both consumers' keys of dSᵀ are there

    // dQ = dS·K [64 queries, D dims]: consumer c takes queries 64·c .. (box c of dSᵀ, M-major) over all 128
    // keys and all dims: new here, where step 21 split the dims.
    float dq[DQ_N / 2];  // register i = query m0 + 64·wg + 16·warp + g + 8·(i/2 % 2), dim 8·(i/4) + 2·q4 + i % 2
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < BLOCK_N / 16; ++kk)
      wgmma_tt<DQ_N, T>(dq, smem_desc(ds_addr + (it % 2) * C::DS_BYTES + wg * kDsBox + kk * 2048, kKvLbo, kSbo),
                        smem_desc(k_addr + kk * 2048, kKvLbo, kSbo), kk > 0);
    wgmma_commit();
    wgmma_wait<0>();  // dV, dK and dQ done: slot s (Q, dO, LSE₂, delta) goes back to the producer
    mbarrier_arrive(&qd_empty[s]);

    // dQ out, in fragment order: 8-column group j of this thread's rows is one float4.
    if constexpr (C::WRITER) {
      named_barrier_sync(kBarDqEmpty + wg, kStagingThreads);  // the writer has read the previous tile's
#pragma unroll
      for (int j = 0; j < DQ_N / 8; ++j)
        my_staging[(j * 4 + warp) * kWarp + lane] = make_float4(dq[4 * j], dq[4 * j + 1], dq[4 * j + 2], dq[4 * j + 3]);
      fence_proxy_async();  // these writes before the bulk copy engine (async proxy) reads them
      named_barrier_arrive(kBarDqFull + wg, kStagingThreads);
    } else {  // "no-writer": the same layout, by 16-byte atomics from the consumer itself
      float4* part = reinterpret_cast<float4*>(dq_part<C>(dq_accum, bh, n_mt, m_begin + it, wg));
#pragma unroll
      for (int j = 0; j < DQ_N / 8; ++j)
        atomicAdd(part + (j * 4 + warp) * kWarp + lane, make_float4(dq[4 * j], dq[4 * j + 1], dq[4 * j + 2], dq[4 * j + 3]));
    }
  }

  // dK (scaled) and dV of this consumer's 64 keys: rounded to T (MHA), or added in fp32 (GQA); step 20's.
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

// ---- kernel 3: dQ_accum (fragment order) -> dQ, scaled and rounded; one thread per float4 slot --------------
// Slot i: lane i % 32, warp i / 32 % 4, group j = i / 128 % (DQ_N/8), consumer c, query tile mt, head bh (the
// inverse of dq_part's order); rows 128·mt + 64·c + 16·warp + g (x, y) and + 8 (z, w), columns 8·j + 2·q4, + 1.
template <class T, class C>
__global__ void convert_dq(const float4* __restrict__ acc, T* __restrict__ dq, long long slots, int n_mt, int seq_q,
                           int head_dim, float scale) {
  constexpr int PART = C::DQ_ROWS * C::DQ_N / 4;  // float4 slots per consumer's part
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < slots; i += (long long)gridDim.x * blockDim.x) {
    const int lane = int(i % kWarp), warp = int(i / kWarp % 4), j = int(i / kWarpgroup % (C::DQ_N / 8));
    const long long part = i / PART;
    const int c = int(part % C::CONSUMERS), mt = int(part / C::CONSUMERS % n_mt);
    const long long bh = part / C::CONSUMERS / n_mt;
    const int row = mt * C::BLOCK_M + C::DQ_ROWS * c + 16 * warp + lane / 4, col = 8 * j + 2 * (lane % 4);
    if (col >= head_dim) continue;
    const float4 v = acc[i];
    T* out = dq + (bh * seq_q + row) * head_dim + col;
    if (row < seq_q) *reinterpret_cast<std::uint32_t*>(out) = pack<T>(v.x * scale, v.y * scale);
    if (row + 8 < seq_q)
      *reinterpret_cast<std::uint32_t*>(out + 8 * head_dim) = pack<T>(v.z * scale, v.w * scale);
  }
}

// ---- kernel 4: fp32 sums to T (GQA's dK, already scaled, and dV; step 20's) ---------------------------------
template <class T>
__global__ void round_to(const float* __restrict__ from, T* __restrict__ to, long long n, float scale) {
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
    to[i] = T(from[i] * scale);
}

// ---- launcher --------------------------------------------------------------------------------------------
// Workspace (fp32): dQ_accum [bh, query tiles, 128·64] in fragment order (whole tiles: seq_q rounded up to 128,
// head_dim to 64), the turn counters [bh, query tiles] (deterministic), delta and LSE₂ [bh,
// seq_q]; with GQA also dK and dV sums [kv_bh, seq_k, head_dim]. Each part starts 256-byte aligned.
struct Workspace {
  std::size_t dq, turns, delta, lse2, dk, dv, total;
  static Workspace of(const fa::AttnParams& p) {
    const std::size_t bh = std::size_t(p.batch) * p.heads, kv_bh = std::size_t(p.batch) * fa::kv_heads_of(p);
    const std::size_t rows = (std::size_t(p.seq_q) + 127) / 128 * 128, d = 64;
    const bool gqa = kv_bh != bh;
    auto up = [](std::size_t b) { return (b + 255) / 256 * 256; };
    Workspace w{};
    w.dq = 0;
    w.turns = up(bh * rows * d * 4);
    w.delta = w.turns + up(bh * rows / 128 * 4);
    w.lse2 = w.delta + up(bh * p.seq_q * 4);
    w.dk = w.lse2 + up(bh * p.seq_q * 4);
    w.dv = w.dk + (gqa ? up(kv_bh * p.seq_k * p.head_dim * 4) : 0);
    w.total = w.dv + (gqa ? up(kv_bh * p.seq_k * p.head_dim * 4) : 0);
    return w;
  }
};
// d > 64 runs step 21, with its workspace.
std::size_t bwd_workspace(const fa::AttnParams& p) {
  return p.head_dim <= 64 ? Workspace::of(p).total : step21::info().bwd_workspace_bytes(p);
}

template <class T, class C>
void launch(const fa::AttnBwdArgs& a, cudaStream_t stream) {
  static const bool ready = [] {
    fa::opt_in_shared_memory(hopper_backward_ws<T, C>, C::SMEM_BYTES, info().name);
    return true;
  }();
  (void)ready;
  const fa::AttnParams& p = a.p;
  const long long bh = (long long)p.batch * p.heads, kv_bh = (long long)p.batch * fa::kv_heads_of(p);
  const int heads_per_kv = p.heads / fa::kv_heads_of(p), n_mt = (p.seq_q + C::BLOCK_M - 1) / C::BLOCK_M;
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
  FA_CUDA_CHECK(cudaMemsetAsync(dq_accum, 0, w.delta - w.dq, stream));  // and the turn counters
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
    hopper_backward_ws<T, C><<<grid, C::THREADS, C::SMEM_BYTES, stream>>>(
        tm_q, tm_k, tm_v, tm_do, lse2, delta, dq_accum, reinterpret_cast<unsigned*>(ws + w.turns), dk_out, dv_out,
        p.seq_q, p.seq_k, p.head_dim, p.scale, p.causal, heads_per_kv);
  FA_CHECK_LAUNCH();
  const long long slots = bh * n_mt * C::BLOCK_M * C::D / 4;
  if (slots > 0)
    convert_dq<T, C><<<unsigned(std::min<long long>((slots + 255) / 256, 4096)), 256, 0, stream>>>(
        reinterpret_cast<const float4*>(dq_accum), static_cast<T*>(a.dq), slots, n_mt, p.seq_q, p.head_dim, p.scale);
  FA_CHECK_LAUNCH();
  auto round_sums = [&](const float* from, void* to, long long n) {
    if (n > 0)
      round_to<T><<<unsigned(std::min<long long>((n + 255) / 256, 4096)), 256, 0, stream>>>(from, static_cast<T*>(to), n,
                                                                                              1.f);
    FA_CHECK_LAUNCH();
  };
  if (heads_per_kv > 1) {
    round_sums(dk_sum, a.dk, kv_bh * p.seq_k * p.head_dim);
    round_sums(dv_sum, a.dv, kv_bh * p.seq_k * p.head_dim);
  }
}

// The variants (StepInfo::variants, in this order): the full step, the writer warp removed, the fixed order.
enum Variant { kFull, kNoWriter, kDeterministic, kVariants };

template <class T, int D>
void launch_variant(const fa::AttnBwdArgs& a, cudaStream_t stream) {
  switch (a.p.variant) {
    case kFull:
      return launch<T, Config<D>>(a, stream);
    case kNoWriter:
      return launch<T, Config<D, false>>(a, stream);
    case kDeterministic:
      return launch<T, Config<D, true, true>>(a, stream);
  }
  throw fa::UsageError(std::string(info().name) + ": no variant " + std::to_string(a.p.variant));
}

void backward(const fa::AttnBwdArgs& a, cudaStream_t stream) {
  fa::check_attention_launch(info(), a.p, {a.q, a.k, a.v, a.o, a.dout, a.dq, a.dk, a.dv}, "Q, K, V, O, dO, dQ, dK and dV");
  // GQA's dK and dV sums are still added in any order: refused, not silently varying.
  if (a.p.variant == kDeterministic && a.p.heads != fa::kv_heads_of(a.p))
    throw fa::UsageError(std::string(info().name) + ": the deterministic variant does not run GQA/MQA yet");
  if (a.p.head_dim > 64) return step21::info().attn_bwd(a, stream);  // d > 64: step 21's tile, unchanged
  a.p.dtype == fa::DType::F16 ? launch_variant<__half, 64>(a, stream) : launch_variant<__nv_bfloat16, 64>(a, stream);
}

// The FlashAttention-2 benchmark shape at seq 2048, head_dim 64 (batch 8, 32 heads), fp16, fwd + bwd (step 21's).
fa::Problem default_problem() {
  fa::Problem p = fa::fa2_problem(2048, 64, /*causal=*/false, fa::DType::F16);
  p.backward = true;
  return p;
}

const fa::StepInfo& info() {
  static const fa::StepInfo i = [] {
    fa::StepInfo s{"24_hopper_backward_wide_tiles",
                   "the warp-specialised Hopper backward with query tiles of 128 at d = 64, each consumer owning half "
                   "the queries of dQ (step 21's backward at d > 64; sm_90a)",
                   fa::Family::Attention};
    s.attn_fwd = step19::info().attn_fwd;
    s.attn_bwd = backward;
    s.attn_rule = {{fa::DType::F16, fa::DType::BF16}, 128, 8};
    s.attn_rule.positive_scale = true;  // step 19's forward takes the row max on unscaled scores
    s.attn_rule.gqa = true;             // dK, dV of a K/V head summed over its query heads (fp32 sums)
    s.variants = {"full", "no-writer", "deterministic"};  // no-writer: the consumers add dQ themselves
    s.fwd_workspace_bytes = step19::info().fwd_workspace_bytes;  // with the forward, its tile counter
    s.bwd_workspace_bytes = bwd_workspace;
    s.workspace_note =
        "forward: step 19's tile counter; backward at d <= 64: dQ_accum in fragment order, batch·heads·seq_q "
        "(rounded up to 128)·64 fp32, a counter per query tile, delta and LSE₂, batch·heads·seq_q fp32 each; with "
        "GQA also dK and dV sums, batch·kv_heads·seq_k·head_dim fp32 each; at d > 64, step 21's";
    s.default_problem = default_problem;
    s.needs_cc = 90;
    return s;
  }();
  return i;
}

}  // namespace step24
