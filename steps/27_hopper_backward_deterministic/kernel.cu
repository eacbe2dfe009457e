// =============================================================================================
// FlashAttention from scratch, step by step, in CUDA C++
// Step 27: a deterministic backward without the queue: dQ's additions in a fixed order, each one step
// behind the one before it
//
// What changes since step 26: only the order in which the key blocks add their dQ partials, and how a block
// learns its work. In step 26's deterministic variant (step 21's order) every query tile takes its key
// blocks' additions in ascending order, and every block walks the tiles from the first: block kb waits at
// its first tile for kb additions, made one after another. The blocks of a head queue behind block 0, and
// each waits longer than the one before. Three changes, all in who adds when:
//   1. A rotated walk (not causal): key block kb starts at query tile kb and wraps around; tile m takes its
//      additions in the order its visitors reach it (m, m − 1, ..., 0, then the last block down to m + 1).
//      Each addition waits only for one made a tile earlier by the next block: no queue. Causal blocks keep
//      step 26's descending order, already such a staircase (each block starts at its diagonal).
//   2. Work by ticket: a block takes its (head, key block) from a counter when it starts, not from
//      blockIdx. It then waits only on blocks that started before it, or (the rotated walk) on blocks of
//      its own head, all of which fit on the GPU at once: the launcher rotates only where they do, and
//      elsewhere keeps the ascending order.
//   3. The writer frees the staging once the bulk copy engine has read it, and counts the tile's turn
//      after: the consumers no longer wait for the additions to land.
// The products, E and the barriers are step 26's. Variants: "in-order" (step 26's orders, with 2 and 3: the
// ablation of 1), "any-order" (step 26's default: additions in any order, not repeatable; the price of the order).
//
// Per query tile it, each consumer (c: this warpgroup's 64 keys, and its [64, 64] part of dQ), as in step 25:
//   wait qd_full[s]   turn: Sᵀ = K_c·Qᵀ, dPᵀ = V_c·dOᵀ [64, BLOCK_M], pass   E: Pᵀ under dPᵀ, then dSᵀ
//   wait ds_empty[it % 2]; dSᵀ into buffer it % 2; fence; arrive ds_full[it % 2]
//   wait ds_full[(it − 1) % 2]   turn: dV += Pᵀ·dO, dK += dSᵀ·Q, dQ_c(it − 1) = dS·K, pass
//   wait; hand slot s back; arrive ds_empty[(it − 1) % 2]; staging c holds dQ_c(it − 1) (the writer: new order)
// and after the last tile its dQ, alone.
//
// Build + run:  cmake --build build --target 27_hopper_backward_deterministic && build/bin/27_hopper_backward_deterministic
// Read with:    docs/27_hopper_backward_deterministic.md
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
#include "hopper_backward.cuh"
#include "launch.h"
#include "mma_sync.cuh"
#include "ops.h"
#include "tensor_map.h"

namespace step19 {
const fa::StepInfo& info();  // the forward of this step (the warp-specialised Hopper forward)
}

namespace step27 {
using namespace fa::ptx;  // step 09's pack, unpack; step 10's exp2_approx; hopper.cuh; hopper_backward.cuh (steps 16, 20, 21)

const fa::StepInfo& info();  // bottom of the file: the step's name for messages

constexpr int kWarp = 32, kWarpgroup = 128;
constexpr int kBox = 64;  // dims per TMA box: 64 16-bit elements = 128 bytes, one swizzle row
constexpr float kLog2e = 1.4426950408889634f;
// Named barriers (0 is __syncthreads): staging c is full / free; consumer c's turn on the tensor cores.
constexpr int kBarDqFull = 2, kBarDqEmpty = 4, kBarTurn = 6;
constexpr int kStagingThreads = kWarpgroup + kWarp;  // a consumer and the writer warp meet there

template <int D_, bool DETERMINISTIC_ = true, bool ROTATE_ = true>
struct Config {
  static constexpr int D = D_, CONSUMERS = 2, THREADS = (CONSUMERS + 1) * kWarpgroup;
  // WIDE (d = 64): step 24's tile of 128 queries, dQ split by queries. d = 128: step 21's tile of 64, dQ split by
  // dims (128 queries would need 256 registers for Sᵀ and dPᵀ alone). Either way a consumer's dQ is [64, 64].
  static constexpr bool WIDE = D == 64, DETERMINISTIC = DETERMINISTIC_, ROTATE = DETERMINISTIC_ && ROTATE_;
  static constexpr int BLOCK_N = 64 * CONSUMERS, BLOCK_M = WIDE ? 128 : 64, STAGES = 2, HALVES = D / kBox;
  static constexpr int DQ_ROWS = 64, DQ_N = 64;  // consumer c: rows 64·c .. (WIDE) or columns 64·c .. (d = 128)
  // setmaxnreg moves registers inside the block's allocation at entry, 168 · 384 (the launch bounds'
  // cap), never beyond it: 128·24 + 256·240 fills it exactly (step 19's d = 128 split). Asking for more
  // makes setmaxnreg.inc wait forever for registers no warp will release.
  static constexpr int PRODUCER_REGS = 24, CONSUMER_REGS = 240;
  static constexpr int ENTRY_REGS = 65536 / THREADS / 8 * 8;
  static_assert(kWarpgroup * (PRODUCER_REGS + CONSUMERS * CONSUMER_REGS) <= ENTRY_REGS * THREADS,
                "setmaxnreg: more registers than the block holds at entry (a hang, not an error)");
  static constexpr int KV_BYTES = BLOCK_N * D * 2, QD_BYTES = BLOCK_M * D * 2, DS_BYTES = BLOCK_N * BLOCK_M * 2;
  static constexpr int DQ_BYTES = DQ_ROWS * DQ_N * 4;  // one consumer's staging: [64, 64] fp32
  // K, V; Q[STAGES], dO[STAGES]; dSᵀ[2]; staging[CONSUMERS]; LSE₂ and delta [STAGES][BLOCK_M]; barriers
  // (kv_full, qd_full and qd_empty per slot, ds_full and ds_empty per dSᵀ buffer), the ticket; 1024.
  static constexpr int SMEM_BYTES = 2 * KV_BYTES + 2 * STAGES * QD_BYTES + 2 * DS_BYTES + CONSUMERS * DQ_BYTES +
                                    2 * STAGES * BLOCK_M * 4 + 8 * (1 + 2 * STAGES + 4 + 1) + 1024;
  static_assert(D == 64 || D == 128, "head_dim instances 64 and 128");
  static_assert(BLOCK_M / CONSUMERS * (WIDE ? 1 : CONSUMERS) == DQ_ROWS && D / (WIDE ? 1 : CONSUMERS) == DQ_N, "dQ parts");
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
// (j·4 + warp)·32 + lane holding rows 16·warp + g and + 8 of the part, columns 8·j + 2·q4 and + 1; the part is
// rows 64·c .. of the tile (WIDE) or its columns 64·c .. (d = 128).
template <class C>
__device__ __forceinline__ float* dq_part(float* dq_accum, int bh, int n_mt, int mt, int c) {
  return dq_accum + ((std::size_t(bh) * n_mt + mt) * C::CONSUMERS + c) * (C::DQ_ROWS * C::DQ_N);
}

// ---- new here: a block's walk over the query tiles ------------------------------------------------------
// Iteration it (< n) visits tile first + (it + rot) mod n: in order from `first` (rot = 0), or rotated, starting
// rot (< n) tiles in and wrapping around (key block kb at tile kb: the deterministic additions' order, write_dq).
struct Walk {
  int first, n, rot;
  __device__ int tile(int it) const { return first + (it + rot < n ? it + rot : it + rot - n); }
};

// ---- the producer: warp 0, Q and dO by TMA, LSE₂ and delta by its 32 lanes ----------------------------------
// Slot it % STAGES, its (it / STAGES)-th fill; an empty barrier is waited on with the opposite parity (a
// fresh barrier's "previous" phase counts as complete, step 18). qd_full takes 32 arrivals: each lane's,
// after its LSE₂ and delta stores (an arrival releases its own thread's writes); lane 0's also expects the
// TMA bytes, before it issues the copies.
template <class T, class C>
__device__ __forceinline__ void produce(const CUtensorMap& tm_q, const CUtensorMap& tm_do, T* Qs, T* dOs,
                                        float* lse_s, float* delta_s, std::uint64_t* qd_full, std::uint64_t* qd_empty,
                                        const float* lse2, const float* delta, int seq_q, Walk walk, int bh) {
  constexpr int BLOCK_M = C::BLOCK_M, STAGES = C::STAGES, HALVES = C::HALVES;
  const int lane = threadIdx.x % kWarp;
  for (int it = 0; it < walk.n; ++it) {
    const int s = it % STAGES, m0 = walk.tile(it) * BLOCK_M;
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
// DETERMINISTIC: the key blocks that visit tile m add in a fixed order, counted in turns[m]; a block adds on
// its turn, waits until its additions are done, then counts. The order is the one in which the visitors
// reach the tile (new here), so that each waits for an addition made a tile earlier, never for a queue:
//   causal: descending from the tile's last visitor (block kb starts at its diagonal tile, step 26's);
//   rotated (kb starts at tile kb): m, m − 1, ..., 0, then the last block down to m + 1;
//   otherwise ascending (step 21's order, where block kb waits at its first tile for kb additions).
template <class C>
__device__ __forceinline__ void write_dq(const float* staging, float* dq_accum, unsigned* turns, int bh, int n_mt,
                                         Walk walk, int kb, bool causal, bool rotate) {
  const int lane = threadIdx.x % kWarp;
  if (walk.n == 0) return;
  for (int c = 0; c < C::CONSUMERS; ++c) named_barrier_arrive(kBarDqEmpty + c, kStagingThreads);
  for (int it = 0; it < walk.n; ++it) {
    const int m = walk.tile(it);
    for (int c = 0; c < C::CONSUMERS; ++c) named_barrier_sync(kBarDqFull + c, kStagingThreads);
    if (lane == 0) {
      if constexpr (C::DETERMINISTIC) {
        const int nkb = gridDim.x, last = causal ? min(nkb - 1, (m * C::BLOCK_M + C::BLOCK_M - 1) / C::BLOCK_N) : nkb - 1;
        const unsigned mine = unsigned(causal ? last - kb : !rotate ? kb : kb <= m ? min(m, last) - kb : m + 1 + last - kb);
        for (unsigned polls = 0; ld_acquire(turns + m) != mine;)
          if (++polls == 1u << 26) __trap();  // seconds: a wrong order would hang the GPU; fail instead
        fence_proxy_async_global();
      }
      for (int c = 0; c < C::CONSUMERS; ++c)
        bulk_reduce_add(dq_part<C>(dq_accum, bh, n_mt, m, c), smem_addr(staging + c * C::DQ_ROWS * C::DQ_N), C::DQ_BYTES);
      bulk_commit();
      bulk_wait_read();
    }
    __syncwarp();
    if (it + 1 < walk.n)
      for (int c = 0; c < C::CONSUMERS; ++c) named_barrier_arrive(kBarDqEmpty + c, kStagingThreads);
    if (C::DETERMINISTIC && lane == 0) {  // new here: counted once done, but the staging freed before (once read)
      bulk_wait();
      fence_proxy_async_global();
      add_release(turns + m, 1);
    }
  }
  if (lane == 0) bulk_wait();  // the additions themselves done before the block retires
}

// ---- kernel 2: one block per (key tile, query head), every query tile that sees it -------------------------
// grid (key tiles, batch·heads); block C::THREADS: warpgroup 0 the producer (warp 0) and the dQ writer
// (warp 1), warpgroups 1 and 2 the consumers. Tensor maps as in step 20; ticket: the deterministic blocks'
// work counter; rotate: the rotated walk (the launcher's choice, not causal).
template <class T, class C>
__global__ void __launch_bounds__(C::THREADS, 1)  // the 1: a register cap at entry, which setmaxnreg needs
    hopper_backward_ws(const __grid_constant__ CUtensorMap tm_q, const __grid_constant__ CUtensorMap tm_k,
                       const __grid_constant__ CUtensorMap tm_v, const __grid_constant__ CUtensorMap tm_do,
                       const float* __restrict__ lse2, const float* __restrict__ delta, float* __restrict__ dq_accum,
                       unsigned* __restrict__ turns, unsigned* __restrict__ ticket, T* __restrict__ dk_out,
                       T* __restrict__ dv_out, int seq_q, int seq_k, int head_dim, float scale, bool causal, bool rotate) {
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
  std::uint64_t* ds_full = qd_empty + STAGES;   // [2]: both consumers' keys of dSᵀ are in buffer b
  std::uint64_t* ds_empty = ds_full + 2;        // [2]: both consumers' dQ has read buffer b

  int* job_s = reinterpret_cast<int*>(ds_empty + 2);  // the block's work, for every thread to read

  if (threadIdx.x == 0) {
    // New here: deterministic, the next ticket, taken as the block starts (so a block that waits on another
    // of its head's waits on one that started before it, or, rotated, on one that can be resident beside it).
    *job_s = C::DETERMINISTIC ? int(atomicAdd(ticket, 1u)) : int(blockIdx.y * gridDim.x + blockIdx.x);
    mbarrier_init(kv_full, 1);
    for (int s = 0; s < STAGES; ++s) mbarrier_init(&qd_full[s], kWarp), mbarrier_init(&qd_empty[s], C::CONSUMERS * kWarpgroup);
    for (int b = 0; b < 2; ++b) mbarrier_init(&ds_full[b], C::CONSUMERS * kWarpgroup), mbarrier_init(&ds_empty[b], C::CONSUMERS * kWarpgroup);
    fence_barrier_init();
  }
  __syncthreads();  // the barriers exist before anyone waits on them, the job is set; the last block-wide barrier

  // Deterministic and causal: key tiles taken last first (write_dq's order: each waits on one started before it).
  const int nkb = gridDim.x, bh = *job_s / nkb, j = *job_s % nkb, kb = C::DETERMINISTIC && causal ? nkb - 1 - j : j;
  const int n0 = kb * BLOCK_N, n_mt = (seq_q + BLOCK_M - 1) / BLOCK_M;
  // Causal (top-left): query i sees key j ≤ i, so the tiles before the one holding query n0 see none.
  const int m_begin = causal ? min(n0 / BLOCK_M, n_mt) : 0, n_iter = n_mt - m_begin;
  const Walk walk{m_begin, n_iter, rotate ? kb : 0};  // rotate: kb < n_mt (the launcher's rule)
  lse2 += std::size_t(bh) * seq_q, delta += std::size_t(bh) * seq_q;

  // ---- warpgroup 0: it hands its registers over; warp 0 copies (K and V once, then produce), warp 1 writes dQ
  if (threadIdx.x < kWarpgroup) {
    setmaxnreg_dec<C::PRODUCER_REGS>();
    const int warp = threadIdx.x / kWarp;
    if (warp == 0) {
      if (threadIdx.x == 0) {
        mbarrier_arrive_expect_tx(kv_full, 2 * C::KV_BYTES);
#pragma unroll
        for (int h = 0; h < HALVES; ++h) {
          tma_load_3d(Ks + h * BLOCK_N * kBox, &tm_k, kv_full, h * kBox, n0, bh);
          tma_load_3d(Vs + h * BLOCK_N * kBox, &tm_v, kv_full, h * kBox, n0, bh);
        }
      }
      produce<T, C>(tm_q, tm_do, Qs, dOs, lse_s, delta_s, qd_full, qd_empty, lse2, delta, seq_q, walk, bh);
    } else if (warp == 1) {
      write_dq<C>(staging, dq_accum, turns + std::size_t(bh) * n_mt, bh, n_mt, walk, kb, causal, rotate);
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

  // The token (step 19): barrier kBarTurn + c is "consumer c's turn to issue"; 256 threads meet there, c's
  // own 128 (sync) and the other consumer's 128 (arrive, as it hands the turn on). Consumer 0 goes first.
  // Each consumer takes the turn twice per tile; consumer 1 does not hand it on after its last group, so
  // that no arrival is left pending when the block exits (synccheck).
  auto take_turn = [&] { named_barrier_sync(kBarTurn + wg, C::CONSUMERS * kWarpgroup); };
  auto pass_turn = [&] { named_barrier_arrive(kBarTurn + (wg ^ 1), C::CONSUMERS * kWarpgroup); };
  if (wg == 1 && n_iter > 0) pass_turn();

  // dQ_c of tile t from dSᵀ buffer t % 2, over all 128 keys: WIDE, dS[64·c .., :]·K, A from box c of dSᵀ
  // (step 24's); d = 128, dS·K[:, 64·c ..], B from box c of K (step 21's split by dims, one box per consumer).
  const std::uint32_t dq_a = ds_addr + (C::WIDE ? wg * kDsBox : 0), dq_b = k_addr + (C::WIDE ? 0 : wg * kKvLbo);
  auto issue_dq = [&](float (&dq)[DQ_N / 2], int t) {
#pragma unroll
    for (int kk = 0; kk < BLOCK_N / 16; ++kk)
      wgmma_tt<DQ_N, T>(dq, smem_desc(dq_a + (t % 2) * C::DS_BYTES + kk * 2048, kKvLbo, kSbo),
                        smem_desc(dq_b + kk * 2048, kKvLbo, kSbo), kk > 0);
  };
  // dQ_c out in fragment order (8-column group j of this thread's rows is one float4), to the writer warp.
  auto stage_dq = [&](const float (&dq)[DQ_N / 2]) {
    named_barrier_sync(kBarDqEmpty + wg, kStagingThreads);  // the writer has read the previous tile's
#pragma unroll
    for (int j = 0; j < DQ_N / 8; ++j)
      my_staging[(j * 4 + warp) * kWarp + lane] = make_float4(dq[4 * j], dq[4 * j + 1], dq[4 * j + 2], dq[4 * j + 3]);
    fence_proxy_async();  // these writes before the bulk copy engine (async proxy) reads them
    named_barrier_arrive(kBarDqFull + wg, kStagingThreads);
  };

  float dk[D / 2], dv[D / 2];  // [64 keys, D] this warpgroup's sums: register i = key key0 + 8·(i/2 % 2), dim 8·(i/4) + 2·q4 + i % 2
#pragma unroll
  for (int i = 0; i < D / 2; ++i) dk[i] = dv[i] = 0.f;
  mbarrier_wait(kv_full, 0);

  for (int it = 0; it < n_iter; ++it) {
    const int s = it % STAGES, m0 = walk.tile(it) * BLOCK_M;
    mbarrier_wait(&qd_full[s], it / STAGES & 1);

    // Sᵀ = K·Qᵀ and dPᵀ = V·dOᵀ: both operands K-major (d contiguous), this warpgroup's 64 keys as M.
    float st[BLOCK_M / 2], dpt[BLOCK_M / 2];  // [64 keys, BLOCK_M queries]: register i = key key0 + 8·(i/2 % 2),
                                              // query m0 + 8·(i/4) + 2·q4 + i % 2
    take_turn();
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      const std::uint32_t a = k_addr + (kk / 4) * kKvLbo + wg * 64 * 128 + (kk % 4) * 32;
      const std::uint32_t b = q_addr + (s * HALVES + kk / 4) * kQdLbo + (kk % 4) * 32;
      wgmma_ss<BLOCK_M, T>(st, smem_desc(a, 16, kSbo), smem_desc(b, 16, kSbo), kk > 0);  // N = BLOCK_M queries
    }
    wgmma_commit();
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      const std::uint32_t a = v_addr + (kk / 4) * kKvLbo + wg * 64 * 128 + (kk % 4) * 32;
      const std::uint32_t b = do_addr + (s * HALVES + kk / 4) * kQdLbo + (kk % 4) * 32;
      wgmma_ss<BLOCK_M, T>(dpt, smem_desc(a, 16, kSbo), smem_desc(b, 16, kSbo), kk > 0);
    }
    wgmma_commit();
    pass_turn();      // the other consumer's group may follow these on the tensor cores
    wgmma_wait<1>();  // Sᵀ has landed; dPᵀ may still be on the tensor cores while Pᵀ is computed

    // E, new here. Pᵀ = 2^(Sᵀ·scale·log2e − LSE₂): one FFMA and one MUFU.EX2 per element. Rows past seq_q
    // need no test (LSE₂ = +inf there: 2^−inf = 0). Keys past seq_k and above the diagonal do: this
    // consumer's 64 keys reach past seq_k only in the last key block, and above a query of the tile only
    // in the first tiles of a causal block; every other tile skips the test.
    const int key_last = n0 + 64 * wg + 63;  // this consumer's last key
    const bool mask = key_last >= seq_k || (causal && key_last > m0);
    auto exponentials = [&](auto masked) {
#pragma unroll
      for (int i = 0; i < BLOCK_M / 2; i += 4) {  // registers i .. i + 3: queries q, q + 1 of keys key0, key0 + 8
        const int q = 8 * (i / 4) + 2 * q4;
        const float2 l = *reinterpret_cast<const float2*>(lse_s + s * BLOCK_M + q);  // LSE₂ of q and q + 1
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const float p = exp2_approx(fmaf(st[i + e], sl2, -(e % 2 ? l.y : l.x)));
          if constexpr (decltype(masked)::value) {
            const int key = key0 + 8 * (e / 2);
            st[i + e] = key < seq_k && !(causal && key > m0 + q + e % 2) ? p : 0.f;
          } else {
            st[i + e] = p;
          }
        }
      }
    };
    if (mask)  // uniform over the warpgroup, and no wgmma inside either path
      exponentials(std::true_type{});
    else
      exponentials(std::false_type{});
    std::uint32_t pt[M_STEPS][4], dst[M_STEPS][4];  // per k-step of 16 queries: step 17's accumulator-to-A relayout
#pragma unroll
    for (int kk = 0; kk < M_STEPS; ++kk)
#pragma unroll
      for (int e = 0; e < 4; ++e) pt[kk][e] = pack<T>(st[8 * kk + 2 * e], st[8 * kk + 2 * e + 1]);
    wgmma_wait<0>();
    // dSᵀ = Pᵀ∘(dPᵀ − delta) in fp32 from the fp32 Pᵀ (step 25 unpacked P as rounded for dV, as step 16
    // has it: two more instructions per pair), then rounded; delta of columns q, q + 1 in one load.
#pragma unroll
    for (int kk = 0; kk < M_STEPS; ++kk)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int i = 8 * kk + 2 * e, q = 8 * (i / 4) + 2 * q4;
        const float2 dl = *reinterpret_cast<const float2*>(delta_s + s * BLOCK_M + q);
        dst[kk][e] = pack<T>(st[i] * (dpt[i] - dl.x), st[i + 1] * (dpt[i + 1] - dl.y));
      }
    // dSᵀ [keys][queries] into buffer it % 2 (step 24's two 64-query boxes, 128-byte swizzle), once both
    // consumers' dQ of tile it − 2 has read it; then this consumer's half is announced (ds_full).
    // Buffer b is read by the dQ of every other iteration from b + 1 on (ds_empty below): the one before this.
    mbarrier_wait(&ds_empty[it % 2], (it - 1) >> 1 & 1);  // it = 0: a fresh barrier's "previous" phase, done
    char* ds_buf = dSt + (it % 2) * C::DS_BYTES;
#pragma unroll
    for (int i = 0; i < BLOCK_M / 2; i += 2) {
      const int r = 64 * wg + 16 * warp + g + 8 * (i / 2 % 2), q = 8 * (i / 4) % 64 + 2 * q4;
      *reinterpret_cast<std::uint32_t*>(ds_buf + i / 32 * kDsBox + r * 128 + ((q / 8) ^ (r % 8)) * 16 + (q % 8) * 2) =
          dst[i / 8][i % 8 / 2];
    }
    fence_proxy_async();  // dSᵀ written by this thread, before the async proxy (the wgmma of both) reads it
    mbarrier_arrive(&ds_full[it % 2]);

    // dV += Pᵀ·dO and dK += dSᵀ·Q (A from registers, B read transposed), and dQ of the previous tile, whose
    // dSᵀ both consumers stored a tile ago: this consumer never waits here for the other's exponentials.
    if (it > 0) mbarrier_wait(&ds_full[(it - 1) % 2], (it - 1) / 2 & 1);
    float dq[DQ_N / 2];  // tile it − 1, register i: part row 16·warp + g + 8·(i/2 % 2), part column 8·(i/4) + 2·q4 + i % 2
    take_turn();
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < M_STEPS; ++kk) {
      const std::uint32_t off = s * HALVES * kQdLbo + kk * 16 * 128;
      wgmma_rs<D, T>(dv, pt[kk], smem_desc(do_addr + off, kQdLbo, kSbo), 1);
      wgmma_rs<D, T>(dk, dst[kk], smem_desc(q_addr + off, kQdLbo, kSbo), 1);
    }
    issue_dq(dq, it + 1);  // buffer (it − 1) % 2; at it = 0 buffer 1, not yet written: a product thrown away,
    wgmma_commit();        // so that no wgmma sits under a branch (ptxas would serialise them all)
    if (wg == 0 || it + 1 < n_iter) pass_turn();  // consumer 1's last group hands nothing on
    wgmma_wait<0>();  // dV, dK and dQ done: slot s (Q, dO, LSE₂, delta) goes back to the producer
    mbarrier_arrive(&qd_empty[s]);
    mbarrier_arrive(&ds_empty[(it + 1) % 2]);  // this consumer's dQ has read buffer (it + 1) % 2
    if (it > 0) stage_dq(dq);
  }
  if (n_iter > 0) {  // the last tile's dQ, after the loop: its dSᵀ complete, no turn to wait for
    const int t = n_iter - 1;
    mbarrier_wait(&ds_full[t % 2], t / 2 & 1);
    float dq[DQ_N / 2];
    wgmma_fence();
    issue_dq(dq, t);
    wgmma_commit();
    wgmma_wait<0>();
    stage_dq(dq);
  }

  // dK (scaled) and dV of this consumer's 64 keys, rounded to T. No GQA here: a K/V head's sums over its
  // query heads would be one more set of additions to order (step 26 adds them in any order).
#pragma unroll
  for (int i = 0; i < D / 2; i += 2) {
    const int key = key0 + 8 * (i / 2 % 2), col = 8 * (i / 4) + 2 * q4;
    if (key >= seq_k || col >= head_dim) continue;
    const std::size_t at = (std::size_t(bh) * seq_k + key) * head_dim + col;
    *reinterpret_cast<std::uint32_t*>(dk_out + at) = pack<T>(dk[i] * scale, dk[i + 1] * scale);
    *reinterpret_cast<std::uint32_t*>(dv_out + at) = pack<T>(dv[i], dv[i + 1]);
  }
}

// ---- kernel 3: dQ_accum (fragment order) -> dQ, scaled and rounded; one thread per float4 slot --------------
// Slot i: lane i % 32, warp i / 32 % 4, group j = i / 128 % (DQ_N/8), consumer c, query tile mt, head bh (the
// inverse of dq_part's order); rows BLOCK_M·mt (+ 64·c, WIDE) + 16·warp + g (x, y) and + 8 (z, w), columns
// (64·c, d = 128) + 8·j + 2·q4 and + 1.
template <class T, class C>
__global__ void convert_dq(const float4* __restrict__ acc, T* __restrict__ dq, long long slots, int n_mt, int seq_q,
                           int head_dim, float scale) {
  constexpr int PART = C::DQ_ROWS * C::DQ_N / 4;  // float4 slots per consumer's part
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < slots; i += (long long)gridDim.x * blockDim.x) {
    const int lane = int(i % kWarp), warp = int(i / kWarp % 4), j = int(i / kWarpgroup % (C::DQ_N / 8));
    const long long part = i / PART;
    const int c = int(part % C::CONSUMERS), mt = int(part / C::CONSUMERS % n_mt);
    const long long bh = part / C::CONSUMERS / n_mt;
    const int row = mt * C::BLOCK_M + (C::WIDE ? 64 * c : 0) + 16 * warp + lane / 4;
    const int col = (C::WIDE ? 0 : 64 * c) + 8 * j + 2 * (lane % 4);
    if (col >= head_dim) continue;
    const float4 v = acc[i];
    T* out = dq + (bh * seq_q + row) * head_dim + col;
    if (row < seq_q) *reinterpret_cast<std::uint32_t*>(out) = pack<T>(v.x * scale, v.y * scale);
    if (row + 8 < seq_q)
      *reinterpret_cast<std::uint32_t*>(out + 8 * head_dim) = pack<T>(v.z * scale, v.w * scale);
  }
}

// ---- launcher --------------------------------------------------------------------------------------------
// Workspace (fp32): dQ_accum [bh, query tiles, BLOCK_M·D] in fragment order (whole tiles: seq_q rounded up to 128,
// head_dim to the instance's D), the turn counters [bh, query tiles of 64 or more] and the ticket after them
// (deterministic), delta and LSE₂ [bh, seq_q]. Each part starts 256-byte aligned.
struct Workspace {
  std::size_t dq, turns, delta, lse2, total;
  static Workspace of(const fa::AttnParams& p) {
    const std::size_t bh = std::size_t(p.batch) * p.heads;
    const std::size_t rows = (std::size_t(p.seq_q) + 127) / 128 * 128, d = p.head_dim <= 64 ? 64 : 128;
    auto up = [](std::size_t b) { return (b + 255) / 256 * 256; };
    Workspace w{};
    w.dq = 0;
    w.turns = up(bh * rows * d * 4);
    w.delta = w.turns + up(bh * rows / 64 * 4 + 4);  // the ticket: the section's last word
    w.lse2 = w.delta + up(bh * p.seq_q * 4);
    w.total = w.lse2 + up(bh * p.seq_q * 4);
    return w;
  }
};
std::size_t bwd_workspace(const fa::AttnParams& p) { return Workspace::of(p).total; }

template <class T, class C>
void launch(const fa::AttnBwdArgs& a, cudaStream_t stream) {
  static const bool ready = [] {
    fa::opt_in_shared_memory(hopper_backward_ws<T, C>, C::SMEM_BYTES, info().name);
    return true;
  }();
  (void)ready;
  const fa::AttnParams& p = a.p;
  const long long bh = (long long)p.batch * p.heads;
  const int n_mt = (p.seq_q + C::BLOCK_M - 1) / C::BLOCK_M;
  const char* name = info().name;
  const Workspace w = Workspace::of(p);
  char* ws = static_cast<char*>(a.workspace);
  if (!ws) throw fa::UsageError(std::string(name) + ": needs its workspace (" + info().workspace_note + ")");
  float *dq_accum = reinterpret_cast<float*>(ws + w.dq), *delta = reinterpret_cast<float*>(ws + w.delta);
  float* lse2 = reinterpret_cast<float*>(ws + w.lse2);
  unsigned *turns = reinterpret_cast<unsigned*>(ws + w.turns), *ticket = reinterpret_cast<unsigned*>(ws + w.delta) - 1;
  const CUtensorMap tm_q = fa::tensor_map_16bit_3d(a.q, p.dtype, bh, p.seq_q, p.head_dim, C::BLOCK_M, kBox, name, "Q");
  const CUtensorMap tm_do = fa::tensor_map_16bit_3d(a.dout, p.dtype, bh, p.seq_q, p.head_dim, C::BLOCK_M, kBox, name, "dO");
  const CUtensorMap tm_k = fa::tensor_map_16bit_3d(a.k, p.dtype, bh, p.seq_k, p.head_dim, C::BLOCK_N, kBox, name, "K");
  const CUtensorMap tm_v = fa::tensor_map_16bit_3d(a.v, p.dtype, bh, p.seq_k, p.head_dim, C::BLOCK_N, kBox, name, "V");
  FA_CUDA_CHECK(cudaMemsetAsync(dq_accum, 0, w.delta - w.dq, stream));  // and the turn counters, the ticket
  const long long rows = bh * p.seq_q;
  if (rows > 0)
    preprocess<T><<<unsigned((rows + 7) / 8), 256, 0, stream>>>(static_cast<const T*>(a.o), static_cast<const T*>(a.dout),
                                                                 a.lse, delta, lse2, rows, p.head_dim);
  FA_CHECK_LAUNCH();
  const dim3 grid(unsigned((p.seq_k + C::BLOCK_N - 1) / C::BLOCK_N), unsigned(bh));
  // New here: the rotated walk only where each key block has a query tile to start at, and a head's key
  // blocks can all be resident at once (its wrap makes them wait on blocks with later tickets: more than fit
  // could each wait on one that never starts). Elsewhere the ascending order, which waits on earlier ones.
  bool rotate = C::ROTATE && !p.causal && int(grid.x) <= n_mt;
  if (rotate) {
    int per_sm = 0;
    FA_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, hopper_backward_ws<T, C>, C::THREADS,
                                                                C::SMEM_BYTES));
    rotate = (long long)grid.x <= (long long)per_sm * fa::sm_count();
  }
  if (grid.x > 0)
    hopper_backward_ws<T, C><<<grid, C::THREADS, C::SMEM_BYTES, stream>>>(
        tm_q, tm_k, tm_v, tm_do, lse2, delta, dq_accum, turns, ticket, static_cast<T*>(a.dk), static_cast<T*>(a.dv),
        p.seq_q, p.seq_k, p.head_dim, p.scale, p.causal, rotate);
  FA_CHECK_LAUNCH();
  const long long slots = bh * n_mt * C::BLOCK_M * C::D / 4;
  if (slots > 0)
    convert_dq<T, C><<<unsigned(std::min<long long>((slots + 255) / 256, 4096)), 256, 0, stream>>>(
        reinterpret_cast<const float4*>(dq_accum), static_cast<T*>(a.dq), slots, n_mt, p.seq_q, p.head_dim, p.scale);
  FA_CHECK_LAUNCH();
}

// The variants (StepInfo::variants, in this order): the rotated order, the ascending one (the ablation), any order.
enum Variant { kDeterministic, kInOrder, kAnyOrder, kVariants };

template <class T, int D>
void launch_variant(const fa::AttnBwdArgs& a, cudaStream_t stream) {
  switch (a.p.variant) {
    case kDeterministic:
      return launch<T, Config<D>>(a, stream);
    case kInOrder:
      return launch<T, Config<D, true, false>>(a, stream);
    case kAnyOrder:
      return launch<T, Config<D, false, false>>(a, stream);
  }
  throw fa::UsageError(std::string(info().name) + ": no variant " + std::to_string(a.p.variant));
}

void backward(const fa::AttnBwdArgs& a, cudaStream_t stream) {
  fa::check_attention_launch(info(), a.p, {a.q, a.k, a.v, a.o, a.dout, a.dq, a.dk, a.dv}, "Q, K, V, O, dO, dQ, dK and dV");
  const bool f16 = a.p.dtype == fa::DType::F16;
  if (a.p.head_dim <= 64)
    f16 ? launch_variant<__half, 64>(a, stream) : launch_variant<__nv_bfloat16, 64>(a, stream);
  else
    f16 ? launch_variant<__half, 128>(a, stream) : launch_variant<__nv_bfloat16, 128>(a, stream);
}

// The FlashAttention-2 benchmark shape at seq 2048, head_dim 64 (batch 8, 32 heads), fp16, fwd + bwd (step 21's).
fa::Problem default_problem() {
  fa::Problem p = fa::fa2_problem(2048, 64, /*causal=*/false, fa::DType::F16);
  p.backward = true;
  return p;
}

const fa::StepInfo& info() {
  static const fa::StepInfo i = [] {
    fa::StepInfo s{"27_hopper_backward_deterministic",
                   "step 26's backward with dQ added in a fixed order that costs no queue: a rotated walk, each "
                   "addition a tile behind the one before it; work by ticket (sm_90a)",
                   fa::Family::Attention};
    s.attn_fwd = step19::info().attn_fwd;
    s.attn_bwd = backward;
    s.attn_rule = {{fa::DType::F16, fa::DType::BF16}, 128, 8};
    s.attn_rule.positive_scale = true;  // step 19's forward takes the row max on unscaled scores
    s.variants = {"deterministic", "in-order", "any-order"};  // in-order: step 26's orders (the ablation)
    s.fwd_workspace_bytes = step19::info().fwd_workspace_bytes;  // with the forward, its tile counter
    s.bwd_workspace_bytes = bwd_workspace;
    s.workspace_note =
        "forward: step 19's tile counter; backward: dQ_accum in fragment order, batch·heads·seq_q (rounded up to "
        "128)·head_dim (64 or 128) fp32, a counter per query tile and the work ticket, delta and LSE₂, "
        "batch·heads·seq_q fp32 each";
    s.default_problem = default_problem;
    s.needs_cc = 90;
    return s;
  }();
  return i;
}

}  // namespace step27
