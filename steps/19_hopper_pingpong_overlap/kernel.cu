// =============================================================================================
// FlashAttention from scratch, step by step, in CUDA C++
// Step 19: the Hopper forward with its GEMMs overlapped with its softmax: ping-pong between the
//          consumers, and inside each consumer the next scores computed under the softmax
//
// What changes since step 18: the roles, barriers, registers and persistent grid are step 18's;
// what changes is when a consumer issues its two products, so that the tensor cores are not idle
// while a softmax runs.
//
//   1. Ping-pong (PINGPONG). Two (at d 64 three) named barriers pass a token: a consumer issues its
//      GEMMs only when it holds it, then hands it over, so one warpgroup's softmax runs under the
//      other's GEMMs.
//   2. Intra-warpgroup overlap (OVERLAP). S_j = Q·K_jᵀ is issued together with O += P_{j-1}·V_{j-1}
//      and the softmax of tile j is written to run while the second one is still on the tensor
//      cores: two score tiles (s being computed, p being read), the first tile and the last peeled
//      off the loop. ptxas reuses p's registers in the softmax and so waits for the second product
//      first (doc 19, "What ptxas made of it").
//   3. The masked skip (MASKED_SKIP, d 64), a refinement for short sequences: a consumer does no work
//      on the key tiles wholly masked for its own 64 rows (causal diagonal, ragged last block) and
//      only keeps the turns and the ring in step.
//
// Block: step 18's, a producer and CONSUMERS warpgroups of 64 query rows, K/V tiles of BLOCK_N = 128
// keys in a ring of STAGES = 2. One consumer, per K/V tile j (with OVERLAP):
//   wait k_full[j]   take the token   S_j = Q·K_jᵀ (D/16 wgmma), O += P_{j-1}·V_{j-1} (BLOCK_N/16)   pass it
//   wait S_j (wgmma_wait<1>)   hand K_j back     softmax of S_j                  [64, BLOCK_N] scores
//   wait O   (wgmma_wait<0>)   hand V_{j-1} back rescale O, pack P_j              [64, D]   accumulator
//
// Build + run:  cmake --build build --target 19_hopper_pingpong_overlap && build/bin/19_hopper_pingpong_overlap
// Read with:    docs/19_hopper_pingpong_overlap.md
// =============================================================================================
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "check.h"
#include "cp_async.cuh"
#include "hopper.cuh"
#include "launch.h"
#include "mma_sync.cuh"
#include "ops.h"
#include "tensor_map.h"

namespace step19 {
using namespace fa::ptx;  // step 09's pack, quad_*; step 10's exp2_approx; hopper.cuh (steps 17-19)

const fa::StepInfo& info();  // bottom of the file: the step's name for messages

constexpr int kWarp = 32, kWarpgroup = 128;
constexpr int kBox = 64;  // dims per TMA box: 64 16-bit elements = 128 bytes, one swizzle row

// The two overlaps as switches, so that doc 19's ablation can remove each one (StepInfo::variants).
template <int D_, bool PINGPONG_ = true, bool OVERLAP_ = true, bool MASKED_SKIP_ = D_ == 64>
struct Config {
  // d 64: three consumers (192 query rows): the products are half as long, so a third warpgroup's
  // softmax is needed to keep the tensor cores busy (doc 18).
  static constexpr int D = D_, CONSUMERS = D == 64 ? 3 : 2, THREADS = (CONSUMERS + 1) * kWarpgroup;
  static constexpr int BLOCK_M = 64 * CONSUMERS, BLOCK_N = 128, STAGES = 2;
  static constexpr bool PINGPONG = PINGPONG_, OVERLAP = OVERLAP_, MASKED_SKIP = MASKED_SKIP_;
  // 65536 registers / THREADS at launch (d 128: 170, ptxas caps at 168; d 64: 128); then the producer
  // keeps 24 or 32 and the consumers share the rest: 128·24 + 256·240 = 64512 = 384·168 (d 128),
  // 128·32 + 384·160 = 65536 = 512·128 (d 64; at 24 the producer would spill, doc 18).
  static constexpr int PRODUCER_REGS = D == 64 ? 32 : 24, CONSUMER_REGS = D == 64 ? 160 : 240;
  static constexpr int HALVES = D / kBox;  // boxes per row of a tile: [HALVES][rows][64]
  static constexpr int Q_BYTES = BLOCK_M * D * 2, KV_BYTES = BLOCK_N * D * 2;
  static constexpr int CONSUMER_WARPS = CONSUMERS * kWarpgroup / kWarp;  // arrivals on an empty barrier
  // Q, then K[STAGES], V[STAGES], then the barriers; 1024 more for aligning the start.
  static constexpr int SMEM_BYTES = Q_BYTES + 2 * STAGES * KV_BYTES + 8 * (2 + 4 * STAGES) + 16 + 1024;
  static_assert(D == 64 || D == 128, "head_dim instances 64 and 128");
  static_assert(SMEM_BYTES <= 227 * 1024, "an sm_90 block's shared memory");
};

__device__ __forceinline__ float safe_shift(float m) { return m == -INFINITY ? 0.f : m; }  // step 10

// The persistent grid's order: tile i -> (query block, head). Heads go in groups of `group`; inside
// a group the query blocks go from first to last (causal: last to first, the heaviest first) and
// the group's heads take turns, so that the blocks running at once share their heads' K/V in L2.
struct Tile {
  int qb, bh;
};
__device__ __forceinline__ Tile tile_at(int i, int n_qb, int bh_count, int group, bool causal) {
  const int first = i / (group * n_qb) * group;   // this group's first head
  const int heads = min(group, bh_count - first);  // the last group may have fewer
  const int within = i - first * n_qb, q = within / heads;
  return {causal ? n_qb - 1 - q : q, first + within % heads};
}

// The K/V tiles that query block m0 .. m0 + BLOCK_M − 1 reads (step 06's stages): all of them, the
// unmasked ones.
template <class C>
__device__ __forceinline__ int kv_tiles(int m0, int seq_q, int seq_k, bool causal) {
  constexpr int BLOCK_M = C::BLOCK_M, BLOCK_N = C::BLOCK_N;
  const int kv_end = causal ? min(seq_k, min(m0 + BLOCK_M, seq_q)) : seq_k;
  return (kv_end + BLOCK_N - 1) / BLOCK_N;
}

// ---- the producer: one thread of warpgroup 0 ------------------------------------------------------------
// Every TMA copy of the block: per tile (query block, head), Q into Qs [HALVES][BLOCK_M][64], then each
// K/V tile into the next slot of Ks, Vs [STAGES][HALVES][BLOCK_N][64] (swizzled; the kernel's layout).
// Counters shared in meaning with the consumers: c tiles of this block so far (Q's phase), it K/V
// tiles so far (slot it % STAGES, its (it / STAGES)-th fill). An empty barrier is waited on with
// the opposite parity: a fresh barrier counts its "previous" phase as complete, so the first
// STAGES fills (and the first Q) go without waiting. The tile's index travels with Q: written to
// tile_slot before q_full's arrival (a release), read by the consumers after their wait (acquire).
template <class T, class C>
__device__ __forceinline__ void produce(const CUtensorMap& tm_q, const CUtensorMap& tm_k, const CUtensorMap& tm_v,
                                        T* Qs, T* Ks, T* Vs, std::uint64_t* q_full, std::uint64_t* q_empty,
                                        std::uint64_t* k_full, std::uint64_t* v_full, std::uint64_t* k_empty,
                                        std::uint64_t* v_empty, volatile int* tile_slot, int* next_tile, int seq_q,
                                        int seq_k, bool causal, int n_qb, int n_work, int bh_count, int group,
                                        int heads_per_kv) {
  constexpr int BLOCK_M = C::BLOCK_M, BLOCK_N = C::BLOCK_N, STAGES = C::STAGES, HALVES = C::HALVES;
  int it = 0, c = 0;
  for (int i = blockIdx.x;; ++c) {  // block b's first tile is b; the next ones come from the counter
    mbarrier_wait(q_empty, (c & 1) ^ 1);  // the previous tile's last S = Q·Kᵀ has completed
    if (i >= n_work) {  // no tile left: tell the consumers, with an arrival that carries no bytes
      *tile_slot = -1;
      mbarrier_arrive(q_full);
      return;
    }
    *tile_slot = i;
    const int next = gridDim.x + atomicAdd(next_tile, 1);  // in flight while this tile's copies go out
    const Tile w = tile_at(i, n_qb, bh_count, group, causal);
    mbarrier_arrive_expect_tx(q_full, C::Q_BYTES);
#pragma unroll
    for (int h = 0; h < HALVES; ++h) tma_load_3d(Qs + h * BLOCK_M * kBox, &tm_q, q_full, h * kBox, w.qb * BLOCK_M, w.bh);
    const int n_tiles = kv_tiles<C>(w.qb * BLOCK_M, seq_q, seq_k, causal);
    for (int t = 0; t < n_tiles; ++t, ++it) {
      const int s = it % STAGES, parity = (it / STAGES & 1) ^ 1;
      mbarrier_wait(&k_empty[s], parity);
      mbarrier_arrive_expect_tx(&k_full[s], C::KV_BYTES);
#pragma unroll
      for (int h = 0; h < HALVES; ++h)
        tma_load_3d(Ks + (s * HALVES + h) * BLOCK_N * kBox, &tm_k, &k_full[s], h * kBox, t * BLOCK_N, w.bh / heads_per_kv);
      mbarrier_wait(&v_empty[s], parity);
      mbarrier_arrive_expect_tx(&v_full[s], C::KV_BYTES);
#pragma unroll
      for (int h = 0; h < HALVES; ++h)
        tma_load_3d(Vs + (s * HALVES + h) * BLOCK_N * kBox, &tm_v, &v_full[s], h * kBox, t * BLOCK_N, w.bh / heads_per_kv);
    }
    i = next;
  }
}

// ---- a consumer's online softmax ----------------------------------------------------------------------
// Step 17's mask and online softmax on s, the [64, BLOCK_N] scores of key tile j; a thread holds rows
// m0 + r0 and m0 + r0 + 8 of the head: register i is row m0 + r0 + 8·(i/2 % 2), key j·BLOCK_N + 8·(i/4) +
// 2·q4 + i % 2. masked: the tile reaches the diagonal or the ragged end of the keys (step 17's tiles from
// n_full on). s becomes P (unnormalised), m and l the two rows' running max and sum, alpha the factor
// their rows of O must be rescaled by. O itself is not touched: it may still be on the tensor cores.
template <class C>
__device__ __forceinline__ void online_softmax(float (&s)[C::BLOCK_N / 2], float (&m)[2], float (&l)[2],
                                               float (&alpha)[2], int j, bool masked, int m0, int r0, int q4, int seq_k,
                                               bool causal, float sl2) {
  constexpr int BLOCK_N = C::BLOCK_N;
  if (masked) {
#pragma unroll
    for (int k = 0; k < BLOCK_N / 2; ++k) {
      const int row = m0 + r0 + 8 * (k / 2 % 2), key = j * BLOCK_N + 8 * (k / 4) + 2 * q4 + k % 2;
      if (key >= (causal ? min(row + 1, seq_k) : seq_k)) s[k] = -INFINITY;
    }
  }
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float tile_max = -INFINITY;
#pragma unroll
    for (int k = 0; k < BLOCK_N / 8; ++k) tile_max = fmaxf(tile_max, fmaxf(s[4 * k + 2 * h], s[4 * k + 2 * h + 1]));
    const float m_new = fmaxf(m[h], quad_max(tile_max));
    alpha[h] = exp2_approx((m[h] - safe_shift(m_new)) * sl2);
    m[h] = m_new;
    const float shift = safe_shift(m_new) * sl2;
    float sum = 0.f;
#pragma unroll
    for (int k = 0; k < BLOCK_N / 8; ++k) {
      s[4 * k + 2 * h] = exp2_approx(fmaf(s[4 * k + 2 * h], sl2, -shift));
      s[4 * k + 2 * h + 1] = exp2_approx(fmaf(s[4 * k + 2 * h + 1], sl2, -shift));
      sum += s[4 * k + 2 * h] + s[4 * k + 2 * h + 1];
    }
    l[h] = l[h] * alpha[h] + sum;
  }
}

// Step 17's epilogue, defined below the kernel (where step 17 has it): O and LSE of a consumer's rows.
template <class T, class C>
__device__ __forceinline__ void store_o(const float (&acc)[C::D / 2], const float (&m)[2], const float (&l)[2], T* o,
                                        float* lse, int seq_q, int head_dim, float scale, int bh, int m0, int r0,
                                        int q4);

// ---- the kernel: a persistent block, its producer and its consumers -----------------------------------------
// grid (min(tiles, SMs)); block C::THREADS; next_tile: a counter, zero at launch. T: __half or __nv_bfloat16. The tensor maps describe
// Q [bh, seq_q, head_dim] and K, V [batch·kv_heads, seq_k, head_dim] in boxes of [rows, 64]; query head h
// reads K/V head h / heads_per_kv (GQA, step 11; 1 for MHA).
template <class T, class C>
__global__ void __launch_bounds__(C::THREADS, 1)  // the 1: a register cap at entry, which setmaxnreg needs
    hopper_ws_forward(const __grid_constant__ CUtensorMap tm_q, const __grid_constant__ CUtensorMap tm_k,
                      const __grid_constant__ CUtensorMap tm_v, T* __restrict__ o, float* __restrict__ lse,
                      int seq_q, int seq_k, int head_dim, float scale, bool causal, int bh_count, int group,
                      int heads_per_kv, int* __restrict__ next_tile) {
  constexpr int D = C::D, BLOCK_M = C::BLOCK_M, BLOCK_N = C::BLOCK_N, STAGES = C::STAGES, HALVES = C::HALVES;
  extern __shared__ uint4 smem_raw[];
  const std::uint32_t raw = smem_addr(smem_raw), base = (raw + 1023) & ~1023u;  // step 17: 1024-aligned
  char* smem = reinterpret_cast<char*>(smem_raw) + (base - raw);
  T* Qs = reinterpret_cast<T*>(smem);               // [HALVES][BLOCK_M][64] swizzled
  T* Ks = reinterpret_cast<T*>(smem + C::Q_BYTES);  // [STAGES][HALVES][BLOCK_N][64]
  T* Vs = Ks + STAGES * BLOCK_N * D;                // [STAGES][HALVES][BLOCK_N][64]
  auto* bars = reinterpret_cast<std::uint64_t*>(Vs + STAGES * BLOCK_N * D);
  std::uint64_t *q_full = bars, *q_empty = bars + 1;  // Q landed / every consumer thread done with it
  std::uint64_t *k_full = bars + 2, *v_full = k_full + STAGES;     // [STAGES]: the slot's copy landed
  std::uint64_t *k_empty = v_full + STAGES, *v_empty = k_empty + STAGES;  // [STAGES]: handed back
  volatile int* tile_slot = reinterpret_cast<int*>(v_empty + STAGES);     // the tile Q belongs to; −1: done

  const int n_qb = (seq_q + BLOCK_M - 1) / BLOCK_M, n_work = n_qb * bh_count;

  if (threadIdx.x == 0) {
    mbarrier_init(q_full, 1);
    mbarrier_init(q_empty, C::CONSUMERS * kWarpgroup);
    for (int s = 0; s < STAGES; ++s) {
      mbarrier_init(&k_full[s], 1), mbarrier_init(&v_full[s], 1);
      mbarrier_init(&k_empty[s], C::CONSUMER_WARPS), mbarrier_init(&v_empty[s], C::CONSUMER_WARPS);
    }
    fence_barrier_init();
  }
  __syncthreads();  // the barriers exist before anyone waits on them; the last block-wide barrier

  // ---- the producer: warpgroup 0 hands its registers over, one of its threads copies (produce) ------------
  if (threadIdx.x < kWarpgroup) {
    setmaxnreg_dec<C::PRODUCER_REGS>();
    if (threadIdx.x != 0) return;  // the other 127 threads have nothing to do
    produce<T, C>(tm_q, tm_k, tm_v, Qs, Ks, Vs, q_full, q_empty, k_full, v_full, k_empty, v_empty, tile_slot,
                  next_tile, seq_q, seq_k, causal, n_qb, n_work, bh_count, group, heads_per_kv);
    return;
  }

  // ---- the consumers: warpgroups 1 .. CONSUMERS -------------------------------------------------------------------
  setmaxnreg_inc<C::CONSUMER_REGS>();
  const float sl2 = scale * 1.4426950408889634f;  // step 10: exp(scale·(s − m)) = 2^(s·sl2 − m·sl2)
  const int cg = threadIdx.x / kWarpgroup - 1;      // consumer cg: query rows 64·cg .. 64·cg + 63
  const int warp = threadIdx.x % kWarpgroup / kWarp, lane = threadIdx.x % kWarp;
  const int g = lane / 4, q4 = lane % 4;   // accumulator rows g, g+8 of the warp's 16; columns 2·q4, +1
  const int r0 = 64 * cg + 16 * warp + g;  // this thread's first row in the block (the other: r0 + 8)
  auto hand_back = [&](std::uint64_t* bar) {  // one arrival per warp, after the warp's wgmma_wait
    if (lane == 0) mbarrier_arrive(bar);
  };
  // q_empty instead takes one arrival per thread: besides Q (read by wgmma) it releases tile_slot,
  // which every thread read with an ordinary load, and an arrival releases only its own thread's
  // accesses (compute-sanitizer's racecheck flags lane 0 arriving for the warp).
  // Ping-pong: barrier 1 + cg is "consumer cg's turn"; 256 threads meet there: its own 128 (sync)
  // and the previous consumer's 128 (arrive, when it hands the turn on). A ring: 0, 1, (2,) 0, ...
  auto take_turn = [&] {
    if constexpr (C::PINGPONG) named_barrier_sync(1 + cg, 2 * kWarpgroup);
  };
  auto pass_turn = [&] {
    if constexpr (C::PINGPONG) named_barrier_arrive(1 + (cg + 1) % C::CONSUMERS, 2 * kWarpgroup);
  };
  if (cg == C::CONSUMERS - 1) pass_turn();  // consumer 0 goes first

  const std::uint32_t q_addr = smem_addr(Qs) + cg * 64 * 128, k_addr = smem_addr(Ks), v_addr = smem_addr(Vs);
  constexpr std::uint32_t kSbo = 8 * 128;         // 8 rows of 128 bytes: one swizzle period
  constexpr std::uint32_t kVLbo = BLOCK_N * 128;  // V: from dims 0-63 to dims 64-127 of the same keys

  float acc[D / 2];      // [64, D] unnormalised O: register i = row r0 + 8·(i/2 % 2), col 8·(i/4) + 2·q4 + i % 2
  float s[BLOCK_N / 2];  // [64, BLOCK_N] scores of tile j, the same layout
  std::uint32_t p[BLOCK_N / 16][4];  // P of tile j − 1 (OVERLAP) or j, packed as wgmma's A registers
#pragma unroll
  for (int i = 0; i < BLOCK_N / 2; ++i) s[i] = 0.f;

  // S = Q·Kᵀ from slot `slot` (step 17), committed as one group.
  auto issue_s = [&](int slot) {
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      const std::uint32_t a = q_addr + (kk / 4) * BLOCK_M * 128 + (kk % 4) * 32;
      const std::uint32_t b = k_addr + (slot * HALVES + kk / 4) * BLOCK_N * 128 + (kk % 4) * 32;
      wgmma_ss<BLOCK_N, T>(s, smem_desc(a, 16, kSbo), smem_desc(b, 16, kSbo), kk > 0);
    }
    wgmma_commit();
  };
  // O += P·V from slot `slot` (step 17), committed as one group.
  auto issue_pv = [&](int slot) {
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < BLOCK_N / 16; ++kk)
      wgmma_rs<D, T>(acc, p[kk], smem_desc(v_addr + slot * C::KV_BYTES + kk * 16 * 128, kVLbo, kSbo), 1);
    wgmma_commit();
  };

  for (int it = 0, c = 0;; ++c) {
    mbarrier_wait(q_full, c & 1);  // Q has landed, or the producer has said there is no tile left
    // Broadcast from lane 0, so that ptxas knows that what follows from it is warp-uniform: the wgmma
    // are in loops it bounds, and a wgmma under a branch it cannot prove uniform gets serialised
    // (warning C7518). Every thread still reads tile_slot (its q_empty arrival releases the read).
    const int i = __shfl_sync(~0u, *tile_slot, 0);
    if (i < 0) break;
    const Tile w = tile_at(i, n_qb, bh_count, group, causal);
    const int m0 = w.qb * BLOCK_M, n_tiles = kv_tiles<C>(m0, seq_q, seq_k, causal);
    const int n_full = (causal ? min(m0 + 1, seq_k) : seq_k) / BLOCK_N;  // the stages of step 06
    // MASKED_SKIP (d 64): the tiles this consumer's own 64 rows see; the block's others are wholly
    // masked for it. Causal: up to its last row's key (192-row blocks over 128-key tiles: one consumer
    // tile in three on the diagonal). Rows all past seq_q (the ragged end of the last query block):
    // none. Warp-uniform by construction; broadcast so that ptxas can tell. At d 128 a 128-row block
    // over 128-key tiles leaves no diagonal tile wholly masked for a consumer: off, the code as without.
    const int seen = causal ? (min(min(m0 + 64 * cg + 64, seq_q), seq_k) + BLOCK_N - 1) / BLOCK_N : n_tiles;
    const int own = C::MASKED_SKIP ? __shfl_sync(~0u, m0 + 64 * cg >= seq_q ? 0 : min(n_tiles, seen), 0) : n_tiles;
#pragma unroll
    for (int k = 0; k < D / 2; ++k) acc[k] = 0.f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f}, alpha[2];  // rows r0, r0 + 8 (step 17)

    auto softmax = [&](int j) { online_softmax<C>(s, m, l, alpha, j, j >= n_full, m0, r0, q4, seq_k, causal, sl2); };
    auto rescale = [&] {  // O's rows by alpha
#pragma unroll
      for (int k = 0; k < D / 8; ++k)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[4 * k + e] *= alpha[e / 2];
    };
    auto pack_p = [&] {  // P of s into wgmma's A registers (step 17)
#pragma unroll
      for (int kk = 0; kk < BLOCK_N / 16; ++kk)
#pragma unroll
        for (int e = 0; e < 4; ++e) p[kk][e] = pack<T>(s[8 * kk + 2 * e], s[8 * kk + 2 * e + 1]);
    };

    if (own == 0) {
      mbarrier_arrive(q_empty);  // no key for these rows (or seq_k = 0): Q is never read
    } else if constexpr (C::OVERLAP) {
      // Tile 0: S only. Then per tile j: S_j and P_{j-1}·V_{j-1} in one turn, S_j's softmax under
      // the second. Last: P_{n-1}·V_{n-1} alone. (Peeled rather than guarded by ifs: a wgmma under
      // a branch ptxas cannot prove uniform gets serialised, warning C7518.)
      auto slot = [&](int j) { return (it + j) % STAGES; };
      auto parity = [&](int j) { return (it + j) / STAGES & 1; };
      mbarrier_wait(&k_full[slot(0)], parity(0));
      take_turn();
      issue_s(slot(0));
      pass_turn();
      wgmma_wait<0>();
      hand_back(&k_empty[slot(0)]);
      if (own == 1) mbarrier_arrive(q_empty);  // the producer may load the next tile's Q
      softmax(0);
      pack_p();
      for (int j = 1; j < own; ++j) {
        mbarrier_wait(&k_full[slot(j)], parity(j));
        mbarrier_wait(&v_full[slot(j - 1)], parity(j - 1));
        take_turn();
        issue_s(slot(j));
        issue_pv(slot(j - 1));
        pass_turn();
        wgmma_wait<1>();  // S_j has landed; P_{j-1}·V_{j-1} may still be running
        hand_back(&k_empty[slot(j)]);
        if (j == own - 1) mbarrier_arrive(q_empty);
        softmax(j);
        wgmma_wait<0>();  // O += P_{j-1}·V_{j-1} has landed: O may be rescaled, p overwritten
        hand_back(&v_empty[slot(j - 1)]);
        rescale();
        pack_p();
      }
      mbarrier_wait(&v_full[slot(own - 1)], parity(own - 1));
      take_turn();
      issue_pv(slot(own - 1));
      pass_turn();
      wgmma_wait<0>();
      hand_back(&v_empty[slot(own - 1)]);
    } else {
      // Step 17's order: S_j, its softmax, then P_j·V_j, each product waited for at once.
      for (int j = 0; j < own; ++j) {
        const int slot = (it + j) % STAGES, parity = (it + j) / STAGES & 1;
        mbarrier_wait(&k_full[slot], parity);
        take_turn();
        issue_s(slot);
        pass_turn();
        wgmma_wait<0>();
        hand_back(&k_empty[slot]);
        if (j == own - 1) mbarrier_arrive(q_empty);
        softmax(j);
        rescale();
        pack_p();
        mbarrier_wait(&v_full[slot], parity);
        take_turn();
        issue_pv(slot);
        pass_turn();
        wgmma_wait<0>();
        hand_back(&v_empty[slot]);
      }
    }
    // The tiles wholly masked for this consumer: each waited for (a slot goes back only after its copy
    // has landed, so that no arrival runs ahead of the producer's phase) and handed back, and its turns
    // taken and passed on as the other consumers take theirs: one per tile with OVERLAP (and the last
    // P·V's when it had no tile at all), two without.
    if constexpr (C::MASKED_SKIP) {
      for (int j = own; j < n_tiles; ++j) {
        const int slot = (it + j) % STAGES, parity = (it + j) / STAGES & 1;
        mbarrier_wait(&k_full[slot], parity);
        mbarrier_wait(&v_full[slot], parity);
#pragma unroll
        for (int t = 0; t < (C::OVERLAP ? 1 : 2); ++t) take_turn(), pass_turn();
        hand_back(&k_empty[slot]);
        hand_back(&v_empty[slot]);
      }
      if (C::OVERLAP && own == 0 && n_tiles > 0) take_turn(), pass_turn();
    }
    it += n_tiles;

    // Step 17's epilogue, while the producer is already loading the next tile's Q and K/V.
    store_o<T, C>(acc, m, l, o, lse, seq_q, head_dim, scale, w.bh, m0, r0, q4);
  }
  if (cg == 0) take_turn();  // consume the last consumer's last hand-over: no arrival left pending at exit
}

// The epilogue (store_o, declared above): step 17's, unchanged. O = acc / l, LSE = m·scale + log l,
// stored straight from the registers, for head bh: each lane writes 4 bytes of rows m0 + r0 and
// m0 + r0 + 8 per 8 dims (rows at or past seq_q: none).
template <class T, class C>
__device__ __forceinline__ void store_o(const float (&acc)[C::D / 2], const float (&m)[2], const float (&l)[2], T* o,
                                        float* lse, int seq_q, int head_dim, float scale, int bh, int m0, int r0,
                                        int q4) {
  constexpr int D = C::D;
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
// The variants (StepInfo::variants, in this order): the full step, then each technique removed.
enum Variant { kFull, kNoPingPong, kNoOverlap, kNoOverlaps, kNoMaskedSkip, kVariants };

template <class T, class C>
void launch(const fa::AttnFwdArgs& a, cudaStream_t stream) {
  static const bool ready = [] {
    fa::opt_in_shared_memory(hopper_ws_forward<T, C>, C::SMEM_BYTES, info().name);
    return true;
  }();
  (void)ready;
  const fa::AttnParams& p = a.p;
  const int bh = p.batch * p.heads, heads_per_kv = p.heads / fa::kv_heads_of(p), kv_bh = bh / heads_per_kv;
  const char* name = info().name;
  const CUtensorMap tm_q = fa::tensor_map_16bit_3d(a.q, p.dtype, bh, p.seq_q, p.head_dim, C::BLOCK_M, kBox, name, "Q");
  const CUtensorMap tm_k = fa::tensor_map_16bit_3d(a.k, p.dtype, kv_bh, p.seq_k, p.head_dim, C::BLOCK_N, kBox, name, "K");
  const CUtensorMap tm_v = fa::tensor_map_16bit_3d(a.v, p.dtype, kv_bh, p.seq_k, p.head_dim, C::BLOCK_N, kBox, name, "V");
  int dev = 0, l2 = 0;
  FA_CUDA_CHECK(cudaGetDevice(&dev));
  FA_CUDA_CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev));
  const int sms = fa::sm_count();
  const long long n_work = (long long)((p.seq_q + C::BLOCK_M - 1) / C::BLOCK_M) * bh;
  // The counter hands out indices up to grid + n_work: keep both within an int.
  if (n_work >= (1LL << 30)) throw fa::UsageError(std::string(name) + ": 2^30 query tiles or more");
  // Causal: as many heads per group as half the L2 holds K and V of (doc 18); otherwise one. GQA:
  // heads_per_kv neighbouring query heads share one K/V head, so a group holds that many times more.
  const long long kv_bytes = 2LL * p.seq_k * C::D * 2;
  const int group = p.causal ? int(std::clamp<long long>(l2 / 2 / kv_bytes * heads_per_kv, 1, bh)) : 1;
  const unsigned grid = unsigned(std::min<long long>(n_work, sms));
  if (!a.workspace) throw fa::UsageError(std::string(name) + ": needs its workspace (the tile counter)");
  int* next_tile = static_cast<int*>(a.workspace);
  FA_CUDA_CHECK(cudaMemsetAsync(next_tile, 0, sizeof(int), stream));
  hopper_ws_forward<T, C><<<grid, C::THREADS, C::SMEM_BYTES, stream>>>(tm_q, tm_k, tm_v, static_cast<T*>(a.o), a.lse,
                                                                       p.seq_q, p.seq_k, p.head_dim, p.scale, p.causal,
                                                                       bh, group, heads_per_kv, next_tile);
  FA_CHECK_LAUNCH();
}

template <class T, int D>
void launch_variant(const fa::AttnFwdArgs& a, cudaStream_t stream) {
  switch (a.p.variant) {
    case kFull: return launch<T, Config<D>>(a, stream);
    case kNoPingPong: return launch<T, Config<D, false, true>>(a, stream);
    case kNoOverlap: return launch<T, Config<D, true, false>>(a, stream);
    case kNoOverlaps: return launch<T, Config<D, false, false>>(a, stream);
    case kNoMaskedSkip: return launch<T, Config<D, true, true, false>>(a, stream);
  }
  throw fa::UsageError(std::string(info().name) + ": no variant " + std::to_string(a.p.variant));
}

void forward(const fa::AttnFwdArgs& a, cudaStream_t stream) {
  fa::check_attention_launch(info(), a.p, {a.q, a.k, a.v, a.o}, "Q, K, V and O");
  const bool f16 = a.p.dtype == fa::DType::F16;
  if (a.p.head_dim <= 64)
    f16 ? launch_variant<__half, 64>(a, stream) : launch_variant<__nv_bfloat16, 64>(a, stream);
  else
    f16 ? launch_variant<__half, 128>(a, stream) : launch_variant<__nv_bfloat16, 128>(a, stream);
}

const fa::StepInfo& info() {
  static const fa::StepInfo i = [] {
    fa::StepInfo s{"19_hopper_pingpong_overlap",
                   "step 18 with its GEMMs overlapped with the softmax: ping-pong, intra-warpgroup overlap (sm_90a)",
                   fa::Family::Attention};
    s.attn_fwd = forward;
    s.attn_rule = {{fa::DType::F16, fa::DType::BF16}, 128, 8};
    s.attn_rule.positive_scale = true;  // step 11's softmax: the row max on unscaled scores
    s.attn_rule.gqa = true;             // grouped-query attention (step 11)
    s.fwd_workspace_bytes = [](const fa::AttnParams&) -> std::size_t { return 16; };
    s.workspace_note = "the persistent grid's tile counter (an int, in 16 bytes)";
    s.variants = {"full", "no-pingpong", "no-overlap", "no-overlaps", "no-masked-skip"};
    s.needs_cc = 90;
    return s;
  }();
  return i;
}

}  // namespace step19
