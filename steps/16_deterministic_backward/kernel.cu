// =============================================================================================
// FlashAttention from scratch, step by step, in CUDA C++
// Step 16: deterministic dQ: the same atomic adds as step 15, each block's in its turn, in an order
//          fixed by the problem, on a persistent grid; dQ bitwise repeatable
//
// What changes since step 15: a second variant. Atomic adds into dQ_accum land in whatever order the
// key blocks reach a query tile, and fp32 addition is not associative, so step 15's dQ differs in its
// last bits from run to run. `--variant deterministic` runs the same kernel and makes the same adds,
// but a block adds its share of a query tile only when its turn has come:
//
//   turns        one counter per query tile in global memory; one thread waits for the block's turn
//                (ld.acquire) in the middle of phase 1, one counts the adds after the next barrier
//                (fence.acq_rel + red)
//   the order    fixed by the problem and following the time at which key blocks reach a tile:
//                by wave of the persistent grid, then by the step at which a block visits the tile
//                (not causal), or lightest key block first (causal)
//   the grid     persistent and cooperative (every block resident, so no block waits for one that
//                has not started), taking key blocks from a counter
//
// Nothing is computed twice (step 12's deterministic variant recomputed S and dP in a dQ kernel of
// its own: 7 products for 5). The default stays atomic, the faster (doc 16 gives the price).
//
// Where to look: Order, ld_acquire, add_release, turn_at (the order and its arithmetic), the ORDERED
// paths of dkdv_block and backward_dkdv, launch_ordered. Everything else is step 15's (with step
// 13's pieces from device/backward_tiles.cuh).
//
// Kernels, in launch order (step 15's): delta; dK/dV (also dQ into fp32 dQ_accum, 256 threads; atomic:
// grid (heads of a group, key blocks of 128, batch·K/V heads / group); deterministic: a persistent
// grid, adds in turn); convert. FA_STEP16_CONFIG=<name> pins a candidate.
//
// Build + run:  cmake --build build --target 16_deterministic_backward && build/bin/16_deterministic_backward
// Read with:    docs/16_deterministic_backward.md
// =============================================================================================
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "autotune.h"
#include "backward_tiles.cuh"
#include "check.h"
#include "cp_async.cuh"
#include "env.h"
#include "launch.h"
#include "mma_sync.cuh"
#include "ops.h"

namespace step11 {
const fa::StepInfo& info();  // the forward of this step
}  // namespace step11

namespace step16 {
using namespace fa::ptx;  // step 09's ldmatrix_x4(_trans), mma_16816, pack; step 10's cp_async_*, exp2_approx, swz
using namespace fa::bwd;  // step 13's Config, copy_tile, pair_at, delta, product_t/kv, store_dkdv

const fa::StepInfo& info();  // bottom of the file: the step's name for messages

// The two ways to produce dQ: AttnParams::variant indexes StepInfo::variants.
enum Variant { kAtomic = 0, kDeterministic = 1 };  // the default first: atomic, measured the faster here

// ---- the order a key block visits its query tiles --------------------------------------------------------
// Step 12's order, staggered: the masked tiles first (the diagonal, or all in a ragged block: P of a
// zero-filled key may overflow, then inf·0 = NaN in dQ), then the unmasked ones from rot = kb mod their
// count on, wrapping around, so a head's key blocks add into different dQ tiles at once (doc 14).
// Causal: tiles before t_begin see no key of the block; tiles from t_full on see every key.
struct Walk {
  int n_q_tiles, t_begin, t_full, n_masked, n_free, rot;
  template <int BLOCK_M, int BLOCK_N>
  __device__ static Walk of(int kb, int seq_q, int seq_k, bool causal, bool stagger) {
    Walk w;
    const int n0 = kb * BLOCK_N;  // first key of the block
    w.n_q_tiles = (seq_q + BLOCK_M - 1) / BLOCK_M;
    w.t_begin = causal ? min(n0 / BLOCK_M, w.n_q_tiles) : 0;
    w.t_full = causal ? min((min(n0 + BLOCK_N, seq_k) - 1 + BLOCK_M - 1) / BLOCK_M, w.n_q_tiles) : 0;
    const bool ragged = n0 + BLOCK_N > seq_k;  // masked on every tile
    w.n_masked = ragged ? w.n_q_tiles - w.t_begin : w.t_full - w.t_begin;
    w.n_free = w.n_q_tiles - w.t_begin - w.n_masked;
    w.rot = stagger && w.n_free > 0 ? kb % w.n_free : 0;
    return w;
  }
  __device__ int visits() const { return n_q_tiles - t_begin; }
  __device__ int at(int i) const {  // the i-th tile visited
    return i < n_masked ? t_begin + i : t_full + (rot + i - n_masked) % max(n_free, 1);
  }
  __device__ int next(int i, int t) const {  // the tile visited after the i-th, t (no division in the loop)
    return i + 1 == n_masked ? t_full + rot : t + 1 == n_q_tiles ? t_full : t + 1;
  }
};

// ---- the deterministic variant: the adds into dQ in a fixed order ----------------------------------------
// Atomic adds into dQ_accum land in whatever order the key blocks reach a tile, and fp32 addition
// is not associative: dQ differs in its last bits from run to run. Here a block adds its share of a
// query tile only in its turn and counts its adds afterwards (turns: one counter per query tile). The
// order is fixed by the problem, never by timing, so dQ is bitwise repeatable; every add is still one
// of the atomic variant's, nothing computed twice (step 12's deterministic variant recomputed S and
// dP in a dQ kernel of its own: 7 products, not 5).
//
// Which order. Waiting costs nothing if a key block's turn has come when it gets to the tile, so the
// order follows the time of the visits. The grid is persistent, `wave` blocks that all run at once
// (a cooperative launch), each taking key blocks in turn from a counter (`next`): the i-th key block
// taken is in wave i / `wave`. A head's key blocks of an earlier wave come first. In a wave:
//   not causal: every key block visits every tile, staggered, all from the same time: by the step at
//               which it visits the tile (ties, where a head has more key blocks than tiles: the one
//               taken first). A block waits for the one that visited the tile one step before it.
//   causal:     the key blocks of a head are taken last one first (the lightest: it sees the fewest
//               tiles) and visit their tiles in order from the diagonal (no stagger). Block kb reaches
//               tile t at (when it started) + (t − its diagonal), and kb + 1, taken earlier, with a
//               diagonal further on, reaches it sooner: the order is the one they are taken in.
// No block waits for one that waits for it (doc 16): a block waits only for blocks of earlier waves
// (taken before it, so running or done) or of its own wave at an earlier step, and a wave's blocks all
// run at once. That needs every block of the grid resident, which a cooperative launch guarantees.
//
// Who waits and who counts: one thread of the block each, so that one warp stalls on the latency of
// L2, not all eight. Warp 1's lane 0 waits for the block's turn in the middle of phase 1 of the tile
// (the barrier after phase 1 then orders the wait before every warp's adds, at the end of phase 3);
// thread 0 counts the adds after the barrier that opens the next tile (every warp's adds are then
// ordered before its fence). A block-wide wait in phase 3 or one counter per warp measured 10-20%
// slower (doc 16).
struct Order {
  unsigned* turns;  // [batch·heads][acc_rows(seq_q) / 64], zeroed: the adds done into each query tile
  unsigned* next;   // key blocks taken so far, zeroed
  int items, wave;  // key blocks in all (batch·K/V heads·n_kb); blocks of the grid
  int group, n_kb;  // head_group (causal); key blocks per head
};
// ld.acquire: what the block that counted before this load saw was written before its count is seen
// by this block after it (and, through a barrier, by every thread of the block).
__device__ __forceinline__ unsigned ld_acquire(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
  return v;
}
// fence.acq_rel + red: every add of the block (ordered before the fence by a barrier) is seen before
// the count is.
__device__ __forceinline__ void add_release(unsigned* p, unsigned v) {
  asm volatile("fence.acq_rel.gpu;\n\tred.relaxed.gpu.global.add.u32 [%0], %1;\n" ::"l"(p), "r"(v) : "memory");
}
// 16 bytes added into fp32 memory, the result not read: one RED.E.ADD.F32x4, where atomicAdd on a
// float4 compiled to a returning ATOMG in an early build of the ORDERED instance.
__device__ __forceinline__ void red_add_v4(float* p, const float (&v)[4]) {
  asm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"l"(p), "f"(v[0]), "f"(v[1]), "f"(v[2]), "f"(v[3])
               : "memory");
}
// The adds into tile t of this head that come before those of key block kb, which visits t at step
// `step`: its turn. [lo, hi): its head's key blocks in its wave (not causal). One warp.
template <int BLOCK_M, int BLOCK_N>
__device__ int turn_at(const Order& o, int t, int step, int kb, int lo, int hi, int seq_q, int seq_k, bool causal) {
  if (causal) return max(0, min(o.n_kb - 1, t / (BLOCK_N / BLOCK_M)) - kb);  // kb' > kb that see t: kb' <= t·BLOCK_M/BLOCK_N
  // Not causal: those of earlier waves (lo of them), then this wave's that visit t at an earlier step
  // or at the same step and were taken first (kb' < kb). Key block kb' visits t at step (t − kb')
  // mod n (Walk: rot = kb' mod n), or at step t if it is the ragged last one (masked, visited in order).
  const int n = (seq_q + BLOCK_M - 1) / BLOCK_M, ragged = seq_k % BLOCK_N ? o.n_kb - 1 : -1, lane = threadIdx.x % kWarp;
  int s = ((t - lo - lane) % n + n) % n, before = 0;  // the step of kb' = lo + lane, then of kb' + 32, ...
  for (int other = lo + lane; other < hi; other += kWarp) {
    const int s_other = other == ragged ? t : s;
    before += s_other < step || (s_other == step && other < kb);
    s -= kWarp % n;
    if (s < 0) s += n;
  }
  return lo + __reduce_add_sync(0xffffffffu, before);
}

// Phase 3. dQ = dS·K for this warp's [Q_QUERIES, Q_DIMS] of the tile, added into `to`, this tile's
// dQ_accum. A = dS, read from dSᵀ by ldmatrix.trans (two keys per register); B = K by ldmatrix.trans.
// ORDERED: the adds by red (the deterministic variant; its turn has come).
template <class T, class C, bool ORDERED>
__device__ __forceinline__ void dq_tile(float* to, const T* dSt, const T* Ks, int o_a, int o_b) {
  constexpr int QM = C::Q_QUERIES / 16, QN = C::Q_DIMS / 16;  // m-tiles of 16 queries, 16-dim slices
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  float c[QM][2 * QN][4] = {};
#pragma unroll
  for (int kk = 0; kk < C::BLOCK_N / 16; ++kk) {
    std::uint32_t a[QM][4];
#pragma unroll
    for (int mt = 0; mt < QM; ++mt) ldmatrix_x4_trans(a[mt], dSt + pair_at(o_a, mt) + 16 * kk * C::BLOCK_M);
#pragma unroll
    for (int dd = 0; dd < QN; ++dd) {
      std::uint32_t b[4];
      ldmatrix_x4_trans(b, Ks + pair_at(o_b, dd) + 16 * kk * C::D);
#pragma unroll
      for (int mt = 0; mt < QM; ++mt) {
        mma_16816<T>(c[mt][2 * dd], a[mt], b[0], b[1]);
        mma_16816<T>(c[mt][2 * dd + 1], a[mt], b[2], b[3]);
      }
    }
  }
  // 16-byte atomics (sm_90: RED.E.ADD.F32x4) in fragment order: a warp's atomic covers 4 whole lines,
  // not 8 partial ones as row-major (doc 14). No bounds: dQ_accum has whole tiles of D columns.
  to += (warp * QM * 2 * QN * kWarp + lane) * 4;
#pragma unroll
  for (int mt = 0; mt < QM; ++mt)
#pragma unroll
    for (int n = 0; n < 2 * QN; ++n) {
      float* at = to + (mt * 2 * QN + n) * kWarp * 4;
#if __CUDA_ARCH__ >= 900
      if constexpr (ORDERED)
        red_add_v4(at, c[mt][n]);
      else
        atomicAdd(reinterpret_cast<float4*>(at), make_float4(c[mt][n][0], c[mt][n][1], c[mt][n][2], c[mt][n][3]));
#else
#pragma unroll
      for (int e = 0; e < 4; ++e) atomicAdd(at + e, c[mt][n][e]);
#endif
    }
}

// ---- the dK/dV kernel: one key block, every query tile that sees it ----------------------------------------
// One key block kb of K/V head kvh (flattened batch·K/V heads), 8 warps, launched by backward_dkdv;
// each query tile's share of dQ is added into dq_accum (fp32, per head acc_rows(seq_q)·D
// floats in fragment order: convert_dq); ORDERED (the deterministic variant), in the block's turn.
// Per query tile, three phases, each its own 2-D tiling of the 8 warps (Config; step 13's banner).
// ORDERED: `taken` is the index at which the block took this key block (Order).
template <class T, class C, bool ORDERED, bool GROUPED>
__device__ __forceinline__ void dkdv_block(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                                           const T* __restrict__ dout, const float* __restrict__ lse,
                                           const float* __restrict__ delta, T* __restrict__ dk, T* __restrict__ dv,
                                           float* __restrict__ dq_accum, int seq_q, int seq_k, int head_dim,
                                           float scale, bool causal, int heads_per_kv, int kb, int kvh, int taken,
                                           const Order& order) {
  constexpr int D = C::D, THREADS = C::THREADS, BLOCK_N = C::BLOCK_N, BLOCK_M = C::BLOCK_M;
  const float sl2 = scale * kLog2e;    // P = 2^(s·sl2 − LSE·log2e): one FFMA and one EX2 per element
  extern __shared__ uint4 smem[];      // uint4: 16-byte alignment for ldmatrix and cp.async
  T* Ks = reinterpret_cast<T*>(smem);  // [BLOCK_N, D] swizzled, this block's keys (whole kernel)
  T* Vs = Ks + BLOCK_N * D;            // [BLOCK_N, D] swizzled, this block's values (whole kernel)
  T* Qs = Vs + BLOCK_N * D;            // [2][BLOCK_M, D] swizzled: this query tile and the next
  T* dOs = Qs + 2 * BLOCK_M * D;       // [2][BLOCK_M, D] swizzled
  T* Pt = dOs + 2 * BLOCK_M * D;       // [BLOCK_N, BLOCK_M] swizzled: Pᵀ
  T* dSt = Pt + BLOCK_N * BLOCK_M;     // [BLOCK_N, BLOCK_M] swizzled: dSᵀ
  float* lse_s = reinterpret_cast<float*>(dSt + BLOCK_N * BLOCK_M);  // [2][BLOCK_M] LSE·log2e (+inf: P = 0)
  float* delta_s = lse_s + 2 * BLOCK_M;                              // [2][BLOCK_M]

  const int n0 = kb * BLOCK_N;     // first key of this block
  const std::size_t kv_bh = kvh;   // flattened (batch, K/V head)
  // GQA: the heads_per_kv query heads of the group (1 for MHA) one after the other, their first here.
  const std::size_t bh = kv_bh * heads_per_kv;  // flattened (batch, query head)
  q += bh * seq_q * head_dim, dout += bh * seq_q * head_dim, lse += bh * seq_q, delta += bh * seq_q;
  k += kv_bh * seq_k * head_dim, v += kv_bh * seq_k * head_dim;
  dq_accum += bh * acc_rows(seq_q) * D;
  unsigned* turns = order.turns + bh * (acc_rows(seq_q) / 64);  // ORDERED: this head's, a counter per query tile
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int g = lane / 4, t4 = lane % 4;  // this lane's fragment rows (g, g+8) and column pair (2·t4)
  // This warp's tile in each phase: first key / query / dim.
  const int sk0 = warp % 4 * C::S_KEYS, sq0 = warp / 4 * C::S_QUERIES;  // phase 1
  const bool dk_warp = C::SPLIT_KV && warp >= 4;  // phase 2: SPLIT_KV, this warp's product is dK (else dV)
  const int vk0 = warp % C::KV_WARPS * C::KV_KEYS;  // phase 2
  const int vd0 = (C::SPLIT_KV ? warp / 2 % 2 : warp / 4) * C::KV_DIMS;
  const int qq0 = warp % C::Q_WARPS * C::Q_QUERIES, qd0 = warp / C::Q_WARPS * C::Q_DIMS;  // phase 3
  constexpr int SM = C::S_KEYS / 16, SN = C::S_QUERIES / 8;  // phase 1: m-tiles of 16 keys, n-tiles of 8 queries
  constexpr int VM = C::KV_KEYS / 16, VN = C::KV_DIMS / 16;  // phase 2: m-tiles of 16 keys, 16-dim slices
  // Each lane's offsets at its first row and chunk pair per product; others: pair_at + 16-row steps (swizzle period 8).
  const int o_s_a = swz<D>(sk0 + lane % 16, lane / 16);                              // Sᵀ, dPᵀ: A = K, V
  const int o_s_b = swz<D>(sq0 + lane % 8 + lane / 16 * 8, lane / 8 % 2);            // Sᵀ, dPᵀ: B = Q, dO
  const int o_kv_a = swz<BLOCK_M>(vk0 + lane % 16, lane / 16);                       // dV, dK: A = Pᵀ, dSᵀ
  const int o_kv_b = swz<D>(lane % 8 + lane / 8 % 2 * 8, vd0 / 8 + lane / 16);       // dV, dK: B = dO, Q
  const int o_q_a = swz<BLOCK_M>(lane % 8 + lane / 16 * 8, qq0 / 8 + lane / 8 % 2);  // dQ: A = dSᵀ
  const int o_q_b = swz<D>(lane % 8 + lane / 8 % 2 * 8, qd0 / 8 + lane / 16);        // dQ: B = K
  const int o_st = swz<BLOCK_M>(sk0 + g, sq0 / 8) + 2 * t4;  // Pᵀ, dSᵀ stores: chunk sq0/8 + j is o_st ^ 8j

  // The query tiles that see this key block, in the order it visits them (Walk): staggered, except
  // in the deterministic variant's causal order.
  const Walk walk = Walk::of<BLOCK_M, BLOCK_N>(kb, seq_q, seq_k, causal, !(ORDERED && causal));
  const int n_masked = walk.n_masked, visits = walk.visits(), t_start = walk.at(0);
  // ORDERED: this key block's turn at the tile visited next, found by one warp a tile ahead (turn_at).
  __shared__ int turn_s[2];
  int lo = 0, hi = 0;  // not causal (one head per group): this wave's key blocks of the head
  if (ORDERED && !causal) {
    const long long first = taken - kb, w = taken / order.wave;  // the head's key block 0 was taken at `first`
    lo = int(min((long long)order.n_kb, max(0LL, w * order.wave - first)));
    hi = int(min((long long)order.n_kb, max(0LL, (w + 1) * order.wave - first)));
  }
  auto find_turn = [&](int i, int t, int buf) {
    const int turn = turn_at<BLOCK_M, BLOCK_N>(order, t, i, kb, lo, hi, seq_q, seq_k, causal);
    if (threadIdx.x % kWarp == 0) turn_s[buf] = turn;
  };
  unsigned* counted = nullptr;  // ORDERED, thread 0: the tile whose adds are still to be counted
  auto count_adds = [&] {       // after a barrier that follows every warp's adds
    if (ORDERED && threadIdx.x == 0 && counted) add_release(counted, 1), counted = nullptr;
  };

  // Thread i < BLOCK_M fetches query i's LSE, BLOCK_M + i its delta, with the tile's copies; smem a tile later.
  auto fetch_row_stat = [&](int m0) -> float {
    const int row = m0 + threadIdx.x % BLOCK_M;
    if (threadIdx.x < BLOCK_M) return lse_log2(lse, row, seq_q);
    return row < seq_q && threadIdx.x < 2 * BLOCK_M ? delta[row] : 0.f;
  };
  auto store_row_stat = [&](int buf, float x) {
    if (threadIdx.x < 2 * BLOCK_M) (threadIdx.x < BLOCK_M ? lse_s : delta_s)[buf * BLOCK_M + threadIdx.x % BLOCK_M] = x;
  };
  auto issue_query_tile = [&](int t, int buf) {  // Q_t and dO_t into buffer buf
    copy_tile<BLOCK_M, D, THREADS>(Qs + buf * BLOCK_M * D, q, t * BLOCK_M, seq_q, head_dim);
    copy_tile<BLOCK_M, D, THREADS>(dOs + buf * BLOCK_M * D, dout, t * BLOCK_M, seq_q, head_dim);
  };

  // K_j and V_j for the whole kernel, and the first query tile (below): one commit group.
  copy_tile<BLOCK_N, D, THREADS>(Ks, k, n0, seq_k, head_dim);
  copy_tile<BLOCK_N, D, THREADS>(Vs, v, n0, seq_k, head_dim);
  // [KV_KEYS, KV_DIMS] this warp's tile of dV, then of dK (unscaled); SPLIT_KV: one, of dK or dV. C fragments.
  float kv_acc[C::KV_ACCS][VM][2 * VN][4] = {};

  auto query_tile = [&](int i, int t, auto masked) {  // the i-th tile visited, t
    const int m0 = t * BLOCK_M;                       // first query of this tile
    const int buf = i & 1;
    cp_async_wait<0>();  // this thread's copies of this tile have landed ...
    __syncthreads();     // ... and everyone's; every warp is also done with the last one (buffer buf^1, Pᵀ, dSᵀ)
    count_adds();        // ORDERED: the last tile's, every warp's adds being before this barrier
    const bool more = i + 1 < visits;
    float stat_next = 0.f;
    if (more) {  // the next tile's copies fly while this one is used
      issue_query_tile(walk.next(i, t), buf ^ 1);
      stat_next = fetch_row_stat(walk.next(i, t) * BLOCK_M);
    }
    cp_async_commit();
    if (ORDERED && more && warp == i % C::WARPS) find_turn(i + 1, walk.next(i, t), buf ^ 1);  // a warp in turn
    const T* Qt = Qs + buf * BLOCK_M * D;
    const T* dOt = dOs + buf * BLOCK_M * D;
    float lse_q[SN][2], delta_q[SN][2];  // of this lane's queries sq0 + 8j + 2·t4 + e
    // ORDERED at head_dim 64: each read after the product that uses it, not held through it (held, the
    // 32 registers take the bf16 d64m128 instance, whose turn logic needs more, to spills; doc 16).
    constexpr bool LATE = ORDERED && D == 64;
    auto read_stats = [&](bool lse, bool dlt) {
#pragma unroll
      for (int j = 0; j < SN; ++j)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          if (lse) lse_q[j][e] = lse_s[buf * BLOCK_M + sq0 + 8 * j + 2 * t4 + e];
          if (dlt) delta_q[j][e] = delta_s[buf * BLOCK_M + sq0 + 8 * j + 2 * t4 + e];
        }
    };
    if constexpr (!LATE) read_stats(true, true);

    // Phase 1. Sᵀ, then Pᵀ = 2^(Sᵀ·sl2 − LSE·log2e) packed at once (frees the fp32 Sᵀ before dPᵀ) and
    // stored. Element e of (mt, j): key n0 + sk0 + 16mt + g + 8·(e/2), query m0 + sq0 + 8j + 2·t4 + e%2.
    std::uint32_t pf[SM][SN][2];
    {
      float s[SM][SN][4];
      product_t<T, D>(s, Ks, Qt, o_s_a, o_s_b);
      if constexpr (LATE) read_stats(true, false);
      if (ORDERED && threadIdx.x == kWarp)  // wait for the block's turn at tile t, half a phase late for slack
        for (unsigned polls = 0; ld_acquire(turns + t) != unsigned(turn_s[buf]);)
          if (++polls == 1u << 26) __trap();  // seconds: a wrong order would hang the GPU; fail instead
#pragma unroll
      for (int mt = 0; mt < SM; ++mt)
#pragma unroll
        for (int j = 0; j < SN; ++j)
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int r = sk0 + 16 * mt + g + 8 * h;  // key in the block
            float p[2];
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              p[e] = exp2_approx(fmaf(s[mt][j][2 * h + e], sl2, -lse_q[j][e]));
              if constexpr (decltype(masked)::value) {
                const int key = n0 + r, query = m0 + sq0 + 8 * j + 2 * t4 + e;
                if (key >= seq_k || (causal && key > query)) p[e] = 0.f;
              }
            }
            pf[mt][j][h] = pack<T>(p[0], p[1]);
            *reinterpret_cast<std::uint32_t*>(Pt + (o_st ^ 8 * j) + (16 * mt + 8 * h) * BLOCK_M) = pf[mt][j][h];
          }
    }
    // dPᵀ, then dSᵀ = Pᵀ ∘ (dPᵀ − delta) (fp32, P as rounded for dV; delta is the query's), stored.
    {
      float dp[SM][SN][4];
      product_t<T, D>(dp, Vs, dOt, o_s_a, o_s_b);
      if constexpr (LATE) read_stats(false, true);
#pragma unroll
      for (int mt = 0; mt < SM; ++mt)
#pragma unroll
        for (int j = 0; j < SN; ++j)
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const float2 p = unpack<T>(pf[mt][j][h]);
            *reinterpret_cast<std::uint32_t*>(dSt + (o_st ^ 8 * j) + (16 * mt + 8 * h) * BLOCK_M) =
                pack<T>(p.x * (dp[mt][j][2 * h] - delta_q[j][0]), p.y * (dp[mt][j][2 * h + 1] - delta_q[j][1]));
          }
    }
    __syncthreads();  // every warp's Pᵀ and dSᵀ are in; ORDERED: this tile's turn has come

    // Phase 2. dV += Pᵀ·dO, dK += dSᵀ·Q (unscaled). SPLIT_KV: [64, D/2] tiles read fewer operand rows
    // per output, for 16 registers of A fragments, not 8 (doc 16).
    if constexpr (C::SPLIT_KV) {
      product_kv<T, D, BLOCK_M>(kv_acc[0], dk_warp ? dSt : Pt, dk_warp ? Qt : dOt, o_kv_a, o_kv_b);  // warp-uniform
    } else {
      product_kv<T, D, BLOCK_M>(kv_acc[0], Pt, dOt, o_kv_a, o_kv_b);
      product_kv<T, D, BLOCK_M>(kv_acc[1], dSt, Qt, o_kv_a, o_kv_b);
    }
    // Phase 3. dQ of this tile, added into its dQ_accum (ORDERED: the turn waited for above).
    dq_tile<T, C, ORDERED>(dq_accum + std::size_t(m0) * D, dSt, Ks, o_q_a, o_q_b);
    if (ORDERED && threadIdx.x == 0) counted = turns + t;  // counted after the next barrier
    if (more) store_row_stat(buf ^ 1, stat_next);  // buffer buf^1 was tile t-1's: free since the first barrier
  };
  // GQA (GROUPED): dK, dV sum over the group's query heads: each head's query tiles in turn, K and V
  // loaded once. MHA instances loop once, a constant: a single pass's code, and its registers.
  for (int head = 0; head < (GROUPED ? heads_per_kv : 1); ++head) {
    if (visits > 0) {
      issue_query_tile(t_start, 0);
      store_row_stat(0, fetch_row_stat(t_start * BLOCK_M));
    }
    cp_async_commit();
    if (ORDERED && visits > 0 && warp == 0) find_turn(0, t_start, 0);
    int i = 0, t = t_start;
    for (; i < n_masked; t = walk.next(i++, t)) query_tile(i, t, std::true_type{});  // the diagonal, or a ragged block
    for (; i < visits; t = walk.next(i++, t)) query_tile(i, t, std::false_type{});   // below it (all, if not causal)
    cp_async_wait<0>();  // an empty group at most; nothing pending at exit
    __syncthreads();     // every warp is done with this head's tiles (and K, V: phase 3 reads every key)
    count_adds();
    q += std::size_t(seq_q) * head_dim, dout += std::size_t(seq_q) * head_dim, lse += seq_q, delta += seq_q;
    dq_accum += acc_rows(seq_q) * D, turns += acc_rows(seq_q) / 64;
  }
  store_dkdv<T, C>(kv_acc, Ks, Vs, dk + kv_bh * seq_k * head_dim, dv + kv_bh * seq_k * head_dim, n0, seq_k, head_dim,
                   scale);
}

// The launches of dkdv_block.
//   atomic:        grid (heads of a group, key blocks, batch·K/V heads / group): blocks start in
//                  x-fastest order, so the group's heads come first at each key block, heaviest first
//                  when causal (head_group; groups of 1 otherwise).
//   ORDERED:       order.wave blocks, all resident, each taking key blocks in turn in the same order
//                  as the atomic grid's, except that a causal head's come lightest first (Order).
template <class T, class C, bool ORDERED, bool GROUPED>
__global__ void __launch_bounds__(C::THREADS)
    backward_dkdv(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v, const T* __restrict__ dout,
                  const float* __restrict__ lse, const float* __restrict__ delta, T* __restrict__ dk,
                  T* __restrict__ dv, float* __restrict__ dq_accum, int seq_q, int seq_k, int head_dim, float scale,
                  bool causal, int heads_per_kv, Order order) {
  if constexpr (ORDERED) {
    __shared__ int taken;
    for (;;) {
      if (threadIdx.x == 0) taken = int(atomicAdd(order.next, 1u));
      __syncthreads();
      const int i = taken, g = order.group;
      if (i >= order.items) return;
      const int pos = i / g % order.n_kb;  // (x, pos, z) as the atomic grid's (x, kb, z)
      dkdv_block<T, C, true, GROUPED>(q, k, v, dout, lse, delta, dk, dv, dq_accum, seq_q, seq_k, head_dim, scale,
                                      causal, heads_per_kv, causal ? order.n_kb - 1 - pos : pos,
                                      i / g / order.n_kb * g + i % g, i, order);
      __syncthreads();  // every thread is done with the key block's shared memory and with `taken`
    }
  } else {
    dkdv_block<T, C, false, GROUPED>(q, k, v, dout, lse, delta, dk, dv, dq_accum, seq_q, seq_k, head_dim, scale,
                                     causal, heads_per_kv, blockIdx.y, blockIdx.z * gridDim.x + blockIdx.x, 0, order);
  }
}

// ---- dQ = scale·dQ_accum -> fp16/bf16 -------------------------------------------------------------------
// dQ_accum in fragment order (dq_tile): a thread takes one lane's 4 floats of a fragment and writes
// them in place, two pairs, if inside [seq_q, head_dim]. slots = floats / 4.
constexpr int kConvertThreads = 256;
template <class T, class C>
__global__ void __launch_bounds__(kConvertThreads)
    convert_dq(const float* __restrict__ acc, T* __restrict__ dq, long long slots, int seq_q, int head_dim,
               float scale) {
  const long long i = (long long)blockIdx.x * kConvertThreads + threadIdx.x;
  if (i >= slots) return;
  const float4 a = reinterpret_cast<const float4*>(acc)[i];
  constexpr int NT = C::Q_DIMS / 8, QM = C::Q_QUERIES / 16, TILE = C::BLOCK_M * C::D / 4;  // slots per tile
  const long long per_head = (long long)acc_rows(seq_q) * C::D / 4, bh = i / per_head;
  const int r = int(i % per_head) % TILE, lane = r % kWarp, n = r / kWarp % NT, mt = r / kWarp / NT % QM,
            warp = r / kWarp / NT / QM;
  const int row = int(i % per_head) / TILE * C::BLOCK_M + warp % C::Q_WARPS * C::Q_QUERIES + 16 * mt + lane / 4;
  const int col = warp / C::Q_WARPS * C::Q_DIMS + 8 * n + 2 * (lane % 4);
  if (col >= head_dim) return;  // head_dim even: col + 1 is inside too
  T* out = dq + (bh * seq_q + row) * head_dim + col;
  if (row < seq_q) *reinterpret_cast<std::uint32_t*>(out) = pack<T>(scale * a.x, scale * a.y);
  if (row + 8 < seq_q) *reinterpret_cast<std::uint32_t*>(out + 8 * head_dim) = pack<T>(scale * a.z, scale * a.w);
}

// ---- workspace and launcher ----------------------------------------------------------------------------------
// Causal: heads in groups, key-block-major (step 15); group·seq_k ≈ 16384 keeps a group's Q, dO and
// dQ_accum in L2. FA_STEP16_GROUP=0: head after head, 1: groups (the default).
int head_group(const fa::AttnParams& p) {
  static const bool off = !fa::env_switch("FA_STEP16_GROUP", true, "0: head after head; 1: head groups, the default");
  const int heads = p.batch * fa::kv_heads_of(p);
  int g = 1;
  while (!off && p.causal && 2 * g * p.seq_k <= 16384 && heads % (2 * g) == 0) g *= 2;
  return g;
}

// [dQ_accum fp32 | counters | delta fp32 [batch·heads·seq_q]]. dQ_accum: per head acc_rows(seq_q) × D, first:
// 16-byte aligned for the 16-byte atomics; a multiple of 32 bytes, the counters padded to 16, so delta is
// aligned too. Counters (deterministic only): Order's turns (per head, 8 per query tile of 64) and next.
// One memset zeroes dQ_accum and them.
std::size_t rows_of(const fa::AttnParams& p) { return std::size_t(p.batch) * p.heads * p.seq_q; }
std::size_t dq_accum_bytes(const fa::AttnParams& p) {
  return std::size_t(p.batch) * p.heads * acc_rows(p.seq_q) * instance_dim(p.head_dim) * sizeof(float);
}
std::size_t turns_count(const fa::AttnParams& p) { return std::size_t(p.batch) * p.heads * acc_rows(p.seq_q) / 64; }
std::size_t counters_bytes(const fa::AttnParams& p) {
  const std::size_t n = p.variant == kAtomic ? 0 : turns_count(p) + 1;
  return (n * sizeof(unsigned) + 15) / 16 * 16;
}
std::size_t bwd_workspace(const fa::AttnParams& p) {
  return dq_accum_bytes(p) + counters_bytes(p) + rows_of(p) * sizeof(float);
}

// The dK, dV kernel of a problem: the grouped instance (its loop over a K/V head's query heads) for GQA only.
template <class T, class C, bool ORDERED>
auto dkdv_kernel(int heads_per_kv) {
  return heads_per_kv > 1 ? backward_dkdv<T, C, ORDERED, true> : backward_dkdv<T, C, ORDERED, false>;
}
// Deterministic: the persistent grid, as many blocks as fit on the GPU at once, all resident: a
// cooperative launch fails rather than run a grid that does not fit.
template <class K, class... Args>
void launch_ordered(K* kernel, int threads, std::size_t smem, cudaStream_t stream, Order& order, const char* name,
                    Args... args) {
  int per_sm = 0;
  FA_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem));
  if (per_sm == 0) throw fa::UsageError(std::string(name) + ": the dK/dV kernel does not fit on an SM");
  order.wave = std::min(order.items, per_sm * fa::sm_count());
  if (const auto cap = fa::env_int("FA_STEP16_WAVE", 1, INT_MAX, "the most blocks of the persistent grid"))
    order.wave = std::min(order.wave, *cap);  // tests: fewer blocks, more waves
  cudaLaunchAttribute cooperative{};
  cooperative.id = cudaLaunchAttributeCooperative;
  cooperative.val.cooperative = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(unsigned(order.wave)), config.blockDim = dim3(unsigned(threads));
  config.dynamicSmemBytes = smem, config.stream = stream, config.attrs = &cooperative, config.numAttrs = 1;
  FA_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, args..., order));
}

template <class T, class C>
void launch(const fa::AttnBwdArgs& a, cudaStream_t stream) {
  static const bool ready = [] {  // once per instance: more than 48 KB of dynamic shared memory
    for (auto* kernel : {backward_dkdv<T, C, false, false>, backward_dkdv<T, C, false, true>,
                         backward_dkdv<T, C, true, false>, backward_dkdv<T, C, true, true>})
      fa::opt_in_shared_memory(kernel, C::DKDV_BYTES, info().name);
    return true;
  }();
  (void)ready;
  const fa::AttnParams& p = a.p;
  const auto *q = static_cast<const T*>(a.q), *k = static_cast<const T*>(a.k), *v = static_cast<const T*>(a.v),
             *o = static_cast<const T*>(a.o), *dout = static_cast<const T*>(a.dout);
  auto *dq = static_cast<T*>(a.dq), *dk = static_cast<T*>(a.dk), *dv = static_cast<T*>(a.dv);
  char* ws = static_cast<char*>(a.workspace);
  auto* dq_accum = reinterpret_cast<float*>(ws);
  auto* counters = reinterpret_cast<unsigned*>(ws + dq_accum_bytes(p));
  float* delta = reinterpret_cast<float*>(ws + dq_accum_bytes(p) + counters_bytes(p));

  const long long rows = (long long)rows_of(p);
  constexpr int kRowsPerBlock = kDeltaThreads / kWarp;
  backward_delta<T><<<unsigned((rows + kRowsPerBlock - 1) / kRowsPerBlock), kDeltaThreads, 0, stream>>>(
      o, dout, delta, rows, p.head_dim);
  FA_CHECK_LAUNCH();
  FA_CUDA_CHECK(cudaMemsetAsync(ws, 0, dq_accum_bytes(p) + counters_bytes(p), stream));

  const int kv_heads = fa::kv_heads_of(p), heads_per_kv = p.heads / kv_heads;
  const int n_kb = (p.seq_k + C::BLOCK_N - 1) / C::BLOCK_N, group = head_group(p);
  if (p.variant == kAtomic) {
    const dim3 grid_kv(group, n_kb, p.batch * kv_heads / group);  // GQA: a block per K/V head
    dkdv_kernel<T, C, false>(heads_per_kv)<<<grid_kv, C::THREADS, C::DKDV_BYTES, stream>>>(
        q, k, v, dout, a.lse, delta, dk, dv, dq_accum, p.seq_q, p.seq_k, p.head_dim, p.scale, p.causal, heads_per_kv,
        Order{});
    FA_CHECK_LAUNCH();
  } else {  // deterministic: the same adds, each warp's in its turn (Order)
    Order order{counters, counters + turns_count(p), n_kb * p.batch * kv_heads, 0, group, n_kb};
    launch_ordered(dkdv_kernel<T, C, true>(heads_per_kv), C::THREADS, C::DKDV_BYTES, stream, order, info().name, q, k,
                   v, dout, a.lse, delta, dk, dv, dq_accum, p.seq_q, p.seq_k, p.head_dim, p.scale, p.causal,
                   heads_per_kv);
  }
  const long long slots = (long long)(dq_accum_bytes(p) / sizeof(float4));
  convert_dq<T, C><<<unsigned((slots + kConvertThreads - 1) / kConvertThreads), kConvertThreads, 0, stream>>>(
      dq_accum, dq, slots, p.seq_q, p.head_dim, p.scale);
  FA_CHECK_LAUNCH();
}

using Candidate = fa::TuneCandidate<fa::AttnBwdArgs>;

// The candidates (name: m BLOCK_M, s SPLIT_KV). head_dim 64: query tiles of 128 or 64, split; head_dim
// 128: 64 (dK, dV take 128 registers), split or not (255 registers: faster in bf16 only, doc 16).
template <class T>
const std::vector<Candidate>& candidates(int d) {
  static const std::vector<Candidate> d64 = {{"d64m128s", launch<T, Config<64, 128, true>>},
                                             {"d64m64s", launch<T, Config<64, 64, true>>}};
  static const std::vector<Candidate> d128 = {{"d128m64", launch<T, Config<128, 64, false>>},
                                              {"d128m64s", launch<T, Config<128, 64, true>>}};
  return instance_dim(d) == 64 ? d64 : d128;
}

// The autotuner (host/autotune.h, as step 11), one cache per element type and problem class.
// FA_STEP16_CONFIG pins a candidate (profiling, tests).
fa::AttnAutotuner<fa::AttnBwdArgs>& tuner() {  // head_dim padded up to an instance with zeros (step 12)
  static fa::AttnAutotuner<fa::AttnBwdArgs> t(info().name, "FA_STEP16_CONFIG", candidates<__half>,
                                              candidates<__nv_bfloat16>, /*by_variant=*/true);
  return t;
}

void backward(const fa::AttnBwdArgs& a, cudaStream_t stream) {
  fa::check_attention_launch(info(), a.p, {a.q, a.k, a.v, a.o, a.dout, a.dq, a.dk, a.dv},
                             "Q, K, V, O, dO, dQ, dK and dV");
  if (a.p.variant != kAtomic && a.p.variant != kDeterministic)
    throw fa::UsageError(std::string(info().name) + ": no variant " + std::to_string(a.p.variant) +
                         " (0: atomic, 1: deterministic)");
  if (!a.workspace)
    throw fa::UsageError(std::string(info().name) + ": the backward needs its workspace (" + info().workspace_note +
                         ")");
  tuner().launch(a, stream);
}

// For the tests, which pin each candidate in turn (FA_STEP16_CONFIG).
int candidate_count(int head_dim) { return tuner().candidate_count(head_dim); }
std::string candidate_name(int head_dim, int i) { return tuner().candidate_name(head_dim, i); }

// Beyond attn_rule: the dK/dV grid's y counts key blocks of 128 (at most 65535).
std::string supports(const fa::Problem& pr) {
  if ((pr.attn.seq_k + 127LL) / 128 > 65535)
    return "seq_k must be at most 65535·128 = 8388480 (the backward's key blocks of 128 are its grid.y; got " +
           std::to_string(pr.attn.seq_k) + ")";
  return "";
}

// The FlashAttention-2 benchmark shape at seq 2048, head_dim 64 (batch 8, 32 heads), fp16, fwd + bwd.
fa::Problem default_problem() {
  fa::Problem p = fa::fa2_problem(2048, 64, /*causal=*/false, fa::DType::F16);
  p.backward = true;
  return p;
}

const fa::StepInfo& info() {
  static const fa::StepInfo i = [] {
    fa::StepInfo s{"16_deterministic_backward",
                   "deterministic dQ: step 15's atomic adds, each in its turn on a persistent grid",
                   fa::Family::Attention};
    s.attn_fwd = step11::info().attn_fwd;
    s.attn_bwd = backward;
    s.attn_rule = {{fa::DType::F16, fa::DType::BF16}, 128, 8};
    s.attn_rule.positive_scale = true;  // step 11's forward takes the row max on unscaled scores
    s.attn_rule.gqa = true;  // dK, dV of a K/V head summed over its group of query heads (backward_dkdv)
    s.variants = {"atomic", "deterministic"};
    s.supports = supports;
    s.bwd_workspace_bytes = bwd_workspace;
    s.workspace_note =
        "dQ_accum, batch·heads·seq_q·head_dim fp32 (seq_q rounded up to 128, head_dim to 64 or 128), and "
        "delta, batch·heads·seq_q fp32; deterministic: also batch·heads·seq_q/64 counters";
    s.default_problem = default_problem;
    return s;
  }();
  return i;
}

}  // namespace step16
