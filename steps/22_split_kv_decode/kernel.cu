// =============================================================================================
// FlashAttention from scratch, step by step, in CUDA C++
// Step 22: split-KV decoding over a KV cache with a length per sequence: the keys of each
//          (sequence, K/V head) split into chunks that different blocks attend to, then merged
//          with step 02's (m, l) merge; the query heads that share a K/V head attend together
//
// When a model generates text, each new token attends with seq_q = 1 (or a few) query rows per
// head to a long cache of keys and values. The forward steps parallelise over query blocks: here
// there is one per (sequence, head), so a batch of a few sequences fills a handful of the 132 SMs,
// and the work is memory-bound (every K/V byte is used by seq_q·G query rows only). Two ideas:
//
//   1. Split-KV (FlashDecoding). The keys [0, len) of a (sequence, K/V head) are cut into
//      n_splits chunks; block (s, ·) attends its query rows to chunk s alone and writes a partial
//      O_s (normalised by its own l_s) and LSE_s in fp32. After a grid barrier (one cooperative
//      launch) the blocks merge the partials of each row: LSE = log Σ_s exp(LSE_s), O = Σ_s
//      exp(LSE_s − LSE)·O_s. That is step 02's merge of two (m, l) states, with O carried along:
//      exp(LSE_s) = l_s·exp(m_s) is a chunk's sum, and each O_s was divided by it. One split (no
//      partials, no merge) when the grid is full without.
//   2. Grouped-query attention read once. The G = H/KVH query heads of a K/V head, and their
//      seq_q rows each, are one [G·seq_q, d] block of Q (heads of a group are adjacent, so these
//      rows are contiguous), so K and V stream through shared memory once for all of them; the
//      rows are the m of the mma (16 or 32 per block; more: further row blocks, grid.z). A group of
//      32 rows goes to two blocks of 16 where that makes the larger grid (block_rows).
//
// Inside a block: 4 warps, K/V tiles of 64 keys in a cp.async ring (step 10), each warp owning 16
// keys of every tile and all the block's rows (128 and 32 where MQA's blocks of 16 rows stream long
// chunks: wide_tiles): S = Q·Kᵀ [rows, 16 keys] is one k-step of P·V, so P goes from the C fragments
// into A fragments as in step 09 (no shared-memory round trip). Each warp keeps its own online-softmax
// state (m, l, O) over its keys; the four are merged through shared memory at the end (step 02's merge).
// A KV cache (AttnParams::kv_cache): sequence b has seq_lens[b] keys of the capacity seq_k; rows
// past it are never read (the copies zero-fill them). Causal aligns its last query with its last
// key: query i sees keys j <= len − seq_q + i. Without a cache every sequence has seq_k keys and
// causal is the series' top-left mask, so the step can be checked against step 11.
//
// Build + run:  cmake --build build --target 22_split_kv_decode && build/bin/22_split_kv_decode
// Read with:    docs/22_split_kv_decode.md
// =============================================================================================
#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "check.h"
#include "cp_async.cuh"
#include "env.h"
#include "launch.h"
#include "mma_sync.cuh"
#include "ops.h"

namespace step22 {
using namespace fa::ptx;  // step 09's ldmatrix_x4, mma_16816, pack, quad_*; step 10's cp_async_*, exp2_approx, swz

const fa::StepInfo& info();

constexpr int kWarp = 32, kWarps = 4, kThreads = kWarps * kWarp;
constexpr int kBlockN = 64;            // keys per tile: 16 per warp
constexpr int kStages = 3;             // K/V ring depth: 2 tiles in flight
constexpr int kMaxSplits = 64;         // partials per row at most (the merge reads them all)
constexpr int kMinSplitKeys = 128;     // a split attends to at least this many keys (2 tiles)
constexpr int kMaxSeqQ = 64;           // query rows per head: decoding, not prefill (steps 11-18)
constexpr float kLog2e = 1.4426950408889634f;

// ---- one instance: the head_dim, the rows of a block, the ring's depth and a tile's keys ----------------
template <int D_, int MF_, int STAGES_ = kStages, int BN_ = kBlockN>
struct Config {
  static constexpr int D = D_, MF = MF_, ROWS = 16 * MF;  // query rows per block: MF 16-row fragments
  static constexpr int STAGES = STAGES_;                  // K/V tiles in the ring: STAGES − 1 in flight
  static constexpr int BN = BN_, KW = BN / kWarps;        // keys per tile, per warp (a multiple of 16)
  static constexpr std::size_t Q_BYTES = 2 * std::size_t(ROWS) * D;
  static constexpr std::size_t RING_BYTES = 2 * std::size_t(2 * STAGES * BN) * D;  // K and V, 16-bit
  static constexpr std::size_t MERGE_BYTES = 4 * std::size_t(kWarps) * ROWS * D;        // fp32 O per warp
  static constexpr std::size_t STAT_BYTES = 4 * std::size_t((2 * kWarps + 2) * ROWS);    // m, l per warp; 1/L, LSE
  // The merge reuses the ring (dead after the last tile).
  static constexpr std::size_t SMEM_BYTES = Q_BYTES + std::max(RING_BYTES, MERGE_BYTES) + STAT_BYTES;
  static_assert(D == 64 || D == 128, "head_dim instances 64 and 128");
  static_assert(KW % 16 == 0, "a warp's keys: whole k-steps of P·V");
  static_assert(SMEM_BYTES <= 227 * 1024, "fits one SM's shared memory");
};

__device__ __forceinline__ float safe_shift(float m) { return m == -INFINITY ? 0.f : m; }  // step 02
// Where dim d of row r of a warp's fp32 O sits in the merge's buffer. Its rows are D floats apart, a multiple of
// the 32 banks, so a store of a C fragment's 8 rows would fall on the same 8 banks 8 times; with each row's
// 8-float chunks permuted by the row (chunk c at c ^ r % 8) the 8 rows take 8 different chunks.
__device__ __forceinline__ int om_col(int r, int d) { return (d / 8 ^ r % 8) * 8 + d % 8; }

// ---- device memory -> shared memory (step 11's TileCopy) --------------------------------------------------
// One 16-byte chunk column per thread, rows r0, r0 + ROW_STEP, ...; rows >= seq and columns >=
// head_dim zero-filled without being read (cp.async with 0 source bytes).
template <int ROWS, int D>
struct TileCopy {
  static constexpr int CHUNKS = D / 8, ROW_STEP = kThreads / CHUNKS, VECS = ROWS / ROW_STEP;
  static_assert(kThreads % CHUNKS == 0 && ROWS % ROW_STEP == 0 && ROW_STEP % 8 == 0, "step 11's layout");
  int r0, c, smem_off;
  __device__ TileCopy() : r0(threadIdx.x / CHUNKS), c(threadIdx.x % CHUNKS), smem_off(swz<D>(r0, c)) {}
  template <class T>
  __device__ __forceinline__ void issue(T* dst, const T* __restrict__ src, int row0, int seq, int head_dim) const {
#pragma unroll
    for (int i = 0; i < VECS; ++i) {
      const bool in = row0 + r0 + i * ROW_STEP < seq && 8 * c < head_dim;
      const T* from = in ? src + std::size_t(row0 + r0 + i * ROW_STEP) * head_dim + 8 * c : src;
      cp_async_16(dst + smem_off + i * ROW_STEP * D, from, in ? 16 : 0);
    }
  }
  // A tile whose ROWS rows all lie before the end: no test per row, and the addresses are the thread's first
  // chunk `from` plus a step of ROW_STEP rows (row_step elements, computed once). bytes: 16, or 0 past head_dim.
  template <class T>
  __device__ __forceinline__ void issue_whole(T* dst, const T* from, int row_step, int bytes) const {
#pragma unroll
    for (int i = 0; i < VECS; ++i) cp_async_16(dst + smem_off + i * ROW_STEP * D, from + i * row_step, bytes);
  }
};

// The merge after the grid barrier (one launch, the default): every warp of the grid merges rows (below).
template <class T>
__device__ void merge_rows_of_grid(const float* part_o, const float* part_lse, T* o, float* lse, int n_splits,
                                   std::size_t rows_total, int head_dim, float4* red);

// ---- the split kernel: one (split, sequence·K/V head, row block) per block ----------------------------
// grid (n_splits, batch·kv_heads·G/group, row blocks); block kThreads. T: __half or __nv_bfloat16. A group
// holds `group` query heads of a K/V head: all G of them (packed, the default) or one (the variant unpacked).
// Its rows r = g·seq_q + i (query i of its g-th query head) are rows (grp·group)·seq_q + r of Q, O and LSE:
// the heads of a K/V head are adjacent. One split: O and LSE directly; else the partials part_o
// [n_splits, rows_total, head_dim] and part_lse [n_splits, rows_total], rows_total = batch·heads·seq_q.
// ONE_LAUNCH (the default, launched cooperatively: every block resident): then a grid barrier and the merge.
template <class T, class C, bool ONE_LAUNCH = false>
__global__ void __launch_bounds__(kThreads)
    decode_split(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                 const int* __restrict__ seq_lens, T* __restrict__ o, float* __restrict__ lse,
                 float* __restrict__ part_o, float* __restrict__ part_lse, int kv_heads, int heads_per_kv, int group,
                 int seq_q, int seq_k, int head_dim, float scale, bool causal, std::size_t rows_total) {
  constexpr int D = C::D, MF = C::MF, ROWS = C::ROWS, BN = C::BN, KW = C::KW;
  const float sl2 = scale * kLog2e;  // step 10: exp(scale·(s − m)) = 2^(s·sl2 − m·sl2)
  extern __shared__ uint4 smem[];
  T* Qs = reinterpret_cast<T*>(smem);     // [ROWS, D] swizzled
  constexpr int STAGES = C::STAGES;       // this instance's ring depth
  T* Ks = Qs + ROWS * D;                  // [STAGES][BN, D] swizzled, a ring
  T* Vs = Ks + STAGES * BN * D;           // [STAGES][BN, D] swizzled
  float* Om = reinterpret_cast<float*>(Ks);  // [kWarps][ROWS, D]: each warp's O, once the ring is dead
  float* Ms = reinterpret_cast<float*>(reinterpret_cast<char*>(smem) + C::SMEM_BYTES - C::STAT_BYTES);
  float* Ls = Ms + kWarps * ROWS;  // Ms, Ls: [kWarps][ROWS] each warp's row max and row sum
  float* Rs = Ls + kWarps * ROWS;  // [2][ROWS]: each row's 1/L and LSE, found once by warp 0

  const int split = blockIdx.x, n_splits = gridDim.x;
  const unsigned grp = blockIdx.y;                                 // flattened (sequence, K/V head, group)
  const std::size_t kv_bh = grp / unsigned(heads_per_kv / group);  // flattened (sequence, K/V head): 32-bit division
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int g = lane / 4, t4 = lane % 4;  // fragment rows g, g + 8 and column pair 2·t4 (step 09)

  // This sequence's keys and where causal aligns (off: query i sees keys j <= i + off).
  const int len = seq_lens ? min(max(seq_lens[kv_bh / kv_heads], 0), seq_k) : seq_k;
  const int off = seq_lens ? len - seq_q : 0;
  // The group's rows; this block's are r0 .. r0 + ROWS − 1 (the last block's past n_rows: zero Q, never stored).
  const int n_rows = group * seq_q, r0 = blockIdx.z * ROWS;
  const std::size_t row_base = std::size_t(grp) * group * seq_q + r0;  // Q/O/LSE row of this block's row 0
  // Keys any row sees: [0, kv_limit) (causal: the last query's). This split's chunk of them, in
  // whole tiles: [k_begin, k_end).
  const int kv_limit = causal ? min(len, max(0, off + seq_q)) : len;
  const int chunk = ((kv_limit + n_splits - 1) / n_splits + BN - 1) / BN * BN;
  const int k_begin = split * chunk, k_end = min(kv_limit, k_begin + chunk);
  const int n_tiles = k_end > k_begin ? (k_end - k_begin + BN - 1) / BN : 0;
  // Tiles from n_free on need the mask: the chunk's ragged end, or causal keys some row may not see.
  const int first_masked = causal ? min(k_end, max(k_begin, off + 1)) : k_end;  // row i = 0 sees j <= off
  const int n_free = max(0, (first_masked - k_begin) / BN);

  q += row_base * head_dim;
  k += kv_bh * seq_k * head_dim, v += kv_bh * seq_k * head_dim;
  TileCopy<ROWS, D>().issue(Qs, q, 0, n_rows - r0, head_dim);
  cp_async_commit();
  // One warp per scheduler issues all of a block's instructions, and a test and a 64-bit multiply per copied
  // row were a third of them. So whole tiles (all but a ragged last one) take their addresses from a start
  // computed once: this thread's chunk of K_t is kv_at + t·BN·head_dim elements from k (of V_t, from v),
  // then one every ROW_STEP rows. Where the stream is bound by that issue (batch 1), this is faster.
  const TileCopy<BN, D> kv_copy;
  const int kv_bytes = 8 * kv_copy.c < head_dim ? 16 : 0, kv_row_step = kv_copy.ROW_STEP * head_dim;
  const std::size_t kv_at = std::size_t(k_begin + kv_copy.r0) * head_dim + (kv_bytes ? 8 * kv_copy.c : 0);
  auto issue = [&](int t) {  // K_t and V_t of the chunk into ring slot t % STAGES; rows >= k_end zero
    if (t < n_tiles) {
      T* const ks = Ks + t % STAGES * BN * D;
      T* const vs = Vs + t % STAGES * BN * D;
      if (k_begin + (t + 1) * BN <= k_end) {
        const std::size_t at = kv_at + std::size_t(t) * BN * head_dim;
        kv_copy.issue_whole(ks, k + at, kv_row_step, kv_bytes);
        kv_copy.issue_whole(vs, v + at, kv_row_step, kv_bytes);
      } else {
        kv_copy.issue(ks, k, k_begin + t * BN, k_end, head_dim);
        kv_copy.issue(vs, v, k_begin + t * BN, k_end, head_dim);
      }
    }
    cp_async_commit();
  };
#pragma unroll
  for (int t = 0; t < STAGES - 1; ++t) issue(t);

  float acc[MF][D / 8][4];   // [ROWS, D] this warp's unnormalised O over its keys, C fragments
  float m[MF][2], l[MF][2];  // rows g, g + 8 of each fragment: running max (raw score), partial sum
#pragma unroll
  for (int mf = 0; mf < MF; ++mf) {
    m[mf][0] = m[mf][1] = -INFINITY, l[mf][0] = l[mf][1] = 0.f;
#pragma unroll
    for (int j = 0; j < D / 8; ++j) acc[mf][j][0] = acc[mf][j][1] = acc[mf][j][2] = acc[mf][j][3] = 0.f;
  }

  auto attend = [&](int t, auto masked) {
    cp_async_wait<STAGES - 2>();  // this thread's copies of tile t (and of Q) have landed ...
    __syncthreads();              // ... and everyone's; every warp is done with tile t − 1
    issue(t + STAGES - 1);        // into the slot tile t − 1 used
    const T* Kt = Ks + t % STAGES * BN * D + KW * warp * D;  // this warp's KW keys
    const T* Vt = Vs + t % STAGES * BN * D + KW * warp * D;  // (16-row steps: the swizzle repeats every 8)

    // S = Q·Kᵀ [ROWS, KW]: per k-step, one ldmatrix of K per 16 keys (keys 0-7 and 8-15) and MF of Q.
    float s[MF][KW / 8][4] = {};
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk)
#pragma unroll
      for (int kg = 0; kg < KW / 16; ++kg) {
        std::uint32_t b[4];
        ldmatrix_x4(b, Kt + 16 * kg * D + swz<D>(lane % 8 + lane / 16 * 8, 2 * kk + lane / 8 % 2));
#pragma unroll
        for (int mf = 0; mf < MF; ++mf) {
          std::uint32_t a[4];
          ldmatrix_x4(a, Qs + swz<D>(16 * mf + lane % 16, 2 * kk + lane / 16));
          mma_16816<T>(s[mf][2 * kg], a, b[0], b[1]);
          mma_16816<T>(s[mf][2 * kg + 1], a, b[2], b[3]);
        }
      }
    if constexpr (decltype(masked)::value) {  // keys past the chunk, or past what the row's query sees
#pragma unroll
      for (int mf = 0; mf < MF; ++mf)
#pragma unroll
        for (int j = 0; j < KW / 8; ++j)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int i = (r0 + 16 * mf + g + 8 * (e / 2)) % seq_q;  // the row's query
            const int key = k_begin + t * BN + KW * warp + 8 * j + 2 * t4 + e % 2;
            if (key >= (causal ? min(k_end, i + off + 1) : k_end)) s[mf][j][e] = -INFINITY;
          }
    }

    // The online softmax of each row over this warp's keys (step 10, one pass: KW keys).
#pragma unroll
    for (int mf = 0; mf < MF; ++mf)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float tile_max = fmaxf(s[mf][0][2 * h], s[mf][0][2 * h + 1]);
#pragma unroll
        for (int j = 1; j < KW / 8; ++j) tile_max = fmaxf(tile_max, fmaxf(s[mf][j][2 * h], s[mf][j][2 * h + 1]));
        tile_max = quad_max(tile_max);
        const float m_new = fmaxf(m[mf][h], tile_max), shift = safe_shift(m_new) * sl2;
        const float alpha = exp2_approx((m[mf][h] - safe_shift(m_new)) * sl2);  // exactly 1 while the max holds
        m[mf][h] = m_new;
        float sum = 0.f;
#pragma unroll
        for (int j = 0; j < KW / 8; ++j) {
          s[mf][j][2 * h] = exp2_approx(fmaf(s[mf][j][2 * h], sl2, -shift));
          s[mf][j][2 * h + 1] = exp2_approx(fmaf(s[mf][j][2 * h + 1], sl2, -shift));
          sum += s[mf][j][2 * h] + s[mf][j][2 * h + 1];
        }
        l[mf][h] = l[mf][h] * alpha + sum;
#pragma unroll
        for (int j = 0; j < D / 8; ++j) acc[mf][j][2 * h] *= alpha, acc[mf][j][2 * h + 1] *= alpha;
      }

    // O += P·V: each 16 keys are one k-step, so P's C fragments are its A fragment (step 09).
#pragma unroll
    for (int kg = 0; kg < KW / 16; ++kg)
#pragma unroll
      for (int mf = 0; mf < MF; ++mf) {
        const float(&p0)[4] = s[mf][2 * kg], (&p1)[4] = s[mf][2 * kg + 1];
        const std::uint32_t a[4] = {pack<T>(p0[0], p0[1]), pack<T>(p0[2], p0[3]), pack<T>(p1[0], p1[1]),
                                    pack<T>(p1[2], p1[3])};
#pragma unroll
        for (int dd = 0; dd < D / 16; ++dd) {
          std::uint32_t b[4];
          ldmatrix_x4_trans(b, Vt + 16 * kg * D + swz<D>(lane % 8 + lane / 8 % 2 * 8, 2 * dd + lane / 16));
          mma_16816<T>(acc[mf][2 * dd], a, b[0], b[1]);
          mma_16816<T>(acc[mf][2 * dd + 1], a, b[2], b[3]);
        }
      }
  };
  int t = 0;
  for (; t < min(n_free, n_tiles); ++t) attend(t, std::false_type{});
  for (; t < n_tiles; ++t) attend(t, std::true_type{});
  cp_async_wait<0>();
  __syncthreads();  // the ring is dead: it holds the warps' O from here

  // Merge the four warps' states of each row (step 02): M = max_w m_w, L = Σ_w l_w·2^((m_w − M)·sl2),
  // O = Σ_w 2^((m_w − M)·sl2)·O_w / L. Each warp's m and l, then its O rescaled to M, via shared memory.
#pragma unroll
  for (int mf = 0; mf < MF; ++mf)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float row_l = quad_sum(l[mf][h]);
      const int r = warp * ROWS + 16 * mf + g + 8 * h;
      if (t4 == 0) Ms[r] = m[mf][h], Ls[r] = row_l;
    }
  __syncthreads();
#pragma unroll
  for (int mf = 0; mf < MF; ++mf)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = 16 * mf + g + 8 * h;
      float M = -INFINITY;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) M = fmaxf(M, Ms[w * ROWS + r]);
      if (warp == 0 && t4 == 0) {  // the row's L, 1/L and LSE = M·scale + ln L (−inf, O = 0: a row that saw no key)
        float L = 0.f;
#pragma unroll
        for (int w = 0; w < kWarps; ++w)
          if (Ms[w * ROWS + r] != -INFINITY) L += Ls[w * ROWS + r] * exp2_approx((Ms[w * ROWS + r] - M) * sl2);
        Rs[r] = L > 0.f ? 1.f / L : 0.f, Rs[ROWS + r] = L > 0.f ? M * scale + logf(L) : -INFINITY;
      }
      const float f = m[mf][h] == -INFINITY ? 0.f : exp2_approx((m[mf][h] - M) * sl2);  // this warp's weight
#pragma unroll
      for (int j = 0; j < D / 8; ++j)
        *reinterpret_cast<float2*>(Om + (warp * ROWS + r) * D + om_col(r, 8 * j + 2 * t4)) =
            make_float2(f * acc[mf][j][2 * h], f * acc[mf][j][2 * h + 1]);
    }
  __syncthreads();

  // Each thread: 4 dims of a row at a time, summed over the warps, times the row's 1/L.
  const bool direct = n_splits == 1;
  for (int x = threadIdx.x; x < ROWS * D / 4; x += kThreads) {
    const int r = x / (D / 4), d = 4 * (x % (D / 4));
    if (r0 + r >= n_rows || d >= head_dim) continue;
    float4 sum = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      const float4 y = *reinterpret_cast<const float4*>(Om + (w * ROWS + r) * D + om_col(r, d));
      sum.x += y.x, sum.y += y.y, sum.z += y.z, sum.w += y.w;
    }
    const float inv = Rs[r], row_lse = Rs[ROWS + r];
    sum.x *= inv, sum.y *= inv, sum.z *= inv, sum.w *= inv;
    const std::size_t row = row_base + r;
    if (direct) {
      *reinterpret_cast<uint2*>(o + row * head_dim + d) = make_uint2(pack<T>(sum.x, sum.y), pack<T>(sum.z, sum.w));
      if (d == 0) lse[row] = row_lse;
    } else {
      *reinterpret_cast<float4*>(part_o + (split * rows_total + row) * head_dim + d) = sum;
      if (d == 0) part_lse[split * rows_total + row] = row_lse;
    }
  }
  if constexpr (ONE_LAUNCH) {
    if (direct) return;
    cooperative_groups::this_grid().sync();  // every split's partials written, and visible (a gpu-scope fence)
    merge_rows_of_grid<T>(part_o, part_lse, o, lse, n_splits, rows_total, head_dim, reinterpret_cast<float4*>(Ks));
  }
}

// ---- the merge: the partials of each row into O and LSE ---------------------------------------------------
// Lane c of a warp holds dims 4c .. 4c + 3 of a row. LSE = M + ln Σ_s exp(LSE_s − M), M = max_s LSE_s;
// O = Σ_s exp(LSE_s − LSE)·O_s. A row whose every split saw no key: LSE = −inf, O = 0.
// Not a loop over s: the partials sit in L2, each load a few hundred cycles of latency and no bandwidth, so
// every round trip in a row counts. The n_splits LSEs (lane s: LSE_s and LSE_{s+32}) are loaded together with
// the first kCombineUnroll O_s, then batches of kCombineUnroll. Above kSpreadSplits splits a row is merged by a
// block's kWarps warps, a quarter of the splits each (one or two batches, not up to eight), summed in shared memory.
constexpr int kCombineThreads = 256, kCombineUnroll = 8, kSpreadSplits = 16;
static_assert(kMaxSplits <= 2 * kWarp, "two split LSEs per lane");
__host__ __device__ constexpr int merge_parts(int n_splits) { return n_splits > kSpreadSplits ? kWarps : 1; }
__device__ __forceinline__ float warp_max(float x) {
#pragma unroll
  for (int o = kWarp / 2; o > 0; o /= 2) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
  return x;
}
__device__ __forceinline__ void fma4(float4& a, float w, const float4& b) {  // a += w·b (exact for w = 1)
  a.x = fmaf(w, b.x, a.x), a.y = fmaf(w, b.y, a.y), a.z = fmaf(w, b.z, a.z), a.w = fmaf(w, b.w, a.w);
}
__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
  for (int o = kWarp / 2; o > 0; o /= 2) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}
// One row's merge by `parts` warps (1, or kWarps: the whole block, which calls it together); this one is part
// `part`, summing splits [part·per, (part + 1)·per). red: parts·kWarp float4 of shared memory. The combine
// kernel's body, and the one launch's merge after its grid barrier, so the two give the same bits.
// __ldcg: the partials were written by other blocks, read past this SM's L1.
template <class T>
__device__ __forceinline__ void merge_row(const float* __restrict__ part_o, const float* __restrict__ part_lse,
                                          T* __restrict__ o, float* __restrict__ lse, int n_splits,
                                          std::size_t rows_total, int head_dim, std::size_t row, int lane, int part,
                                          int parts, float4* red) {
  const int d = 4 * lane, per = (n_splits + parts - 1) / parts;
  const int s_begin = part * per, s_end = min(n_splits, s_begin + per);
  // Lanes past head_dim read the last 4 dims again and store nothing: no branch between the loads.
  const float* from = part_o + row * head_dim + min(d, head_dim - 4);
  float4 y[kCombineUnroll];  // O_s of kCombineUnroll splits, all in flight
  auto load = [&](int s0) {
#pragma unroll
    for (int u = 0; u < kCombineUnroll; ++u)
      y[u] = s0 + u < s_end ? __ldcg(reinterpret_cast<const float4*>(from + (s0 + u) * rows_total * head_dim))
                            : make_float4(0.f, 0.f, 0.f, 0.f);
  };
  const float ls0 = lane < n_splits ? __ldcg(part_lse + lane * rows_total + row) : -INFINITY;  // LSE_lane
  const float ls1 = lane + kWarp < n_splits ? __ldcg(part_lse + (lane + kWarp) * rows_total + row) : -INFINITY;
  load(s_begin);  // the first O_s in the same round trip as the LSEs: they do not need the weights
  const float M = warp_max(fmaxf(ls0, ls1));
  // A split that saw no key of the row (LSE_s = −inf) weighs 0, and so does every split when none did.
  const float w0 = ls0 == -INFINITY ? 0.f : __expf(ls0 - M), w1 = ls1 == -INFINITY ? 0.f : __expf(ls1 - M);
  const float L = warp_sum(w0 + w1), inv = L > 0.f ? 1.f / L : 0.f;
  float4 sum = make_float4(0.f, 0.f, 0.f, 0.f);
  for (int s0 = s_begin;;) {
#pragma unroll
    for (int u = 0; u < kCombineUnroll; ++u) {  // the sum (past s_end: 0 times a finite weight)
      const int s = s0 + u;
      fma4(sum, __shfl_sync(0xffffffffu, s < kWarp ? w0 : w1, s % kWarp), y[u]);  // split s's weight
    }
    if ((s0 += kCombineUnroll) >= s_end) break;
    load(s0);
  }
  if (parts > 1) {  // the parts' sums, added in part order by part 0
    red[part * kWarp + lane] = sum;
    __syncthreads();
    for (int q = 1; part == 0 && q < parts; ++q) fma4(sum, 1.f, red[q * kWarp + lane]);
    __syncthreads();  // red is read before the block's next row writes it
    if (part != 0) return;
  }
  if (d < head_dim)
    *reinterpret_cast<uint2*>(o + row * head_dim + d) =
        make_uint2(pack<T>(sum.x * inv, sum.y * inv), pack<T>(sum.z * inv, sum.w * inv));
  if (d == 0) lse[row] = L > 0.f ? M + logf(L) : -INFINITY;
}
// One launch: units of merge_parts warps of a block, unit u (warp-major: rows spread over SMs) merging rows
// u, u + units, ...; red: the block's dead ring.
template <class T>
__device__ void merge_rows_of_grid(const float* part_o, const float* part_lse, T* o, float* lse, int n_splits,
                                   std::size_t rows_total, int head_dim, float4* red) {
  const int parts = merge_parts(n_splits), warp = threadIdx.x / kWarp;
  const std::size_t blocks = std::size_t(gridDim.x) * gridDim.y * gridDim.z;
  const std::size_t block = (std::size_t(blockIdx.z) * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x;
  for (std::size_t row = warp / parts * blocks + block; row < rows_total; row += blocks * (kWarps / parts))
    merge_row<T>(part_o, part_lse, o, lse, n_splits, rows_total, head_dim, row, threadIdx.x % kWarp, warp % parts,
                 parts, red);
}
// Two launches: a block of kCombineThreads, a row per warp; above kSpreadSplits splits, kWarps warps per row.
template <class T>
__global__ void __launch_bounds__(kCombineThreads)
    combine(const float* __restrict__ part_o, const float* __restrict__ part_lse, T* __restrict__ o,
            float* __restrict__ lse, int n_splits, std::size_t rows_total, int head_dim) {
  __shared__ float4 red[kWarps * kWarp];
  const int parts = merge_parts(n_splits), warp = threadIdx.x / kWarp;
  const std::size_t row = std::size_t(blockIdx.x) * (blockDim.x / kWarp / parts) + warp / parts;
  if (row >= rows_total) return;  // the whole warp (parts 1) or block (a block of kWarps warps is one row)
  merge_row<T>(part_o, part_lse, o, lse, n_splits, rows_total, head_dim, row, threadIdx.x % kWarp, warp % parts,
               parts, red);
}

// ---- the number of splits ---------------------------------------------------------------------------------
// Blocks without splitting: batch·kv_heads·row_blocks. If that already fills the SMs, one split; else as
// many splits as one wave of one block per SM holds (rounded down: one block past the wave runs as a
// second wave of its own; and one block streams its chunk as fast as two halves on one SM would, without
// their second partial), each at least kMinSplitKeys keys of the capacity, at most kMaxSplits.
// The variants (StepInfo::variants, in this order): one cooperative launch whose blocks merge after a grid barrier,
// with the row rule below (the default); the split kernel then the combine kernel (two-launches: the same bits);
// one launch with 32-row blocks for every group of more than 16 rows (rows32: the rule switched off); one
// launch with each query head a group of its own (unpacked: K and V read once per query head, not per K/V head);
// and tiles of 128 keys, 32 per warp, in blocks of 16 rows for every shape (tiles128; the default: wide_tiles).
enum Variant { kOneLaunch, kTwoLaunches, kRows32, kUnpacked, kTiles128 };
int heads_per_group(const fa::AttnParams& p) { return p.variant == kUnpacked ? 1 : p.heads / fa::kv_heads_of(p); }
int group_rows(const fa::AttnParams& p) { return heads_per_group(p) * p.seq_q; }
// The rule's split count for blocks of `block` rows. sms: fa::sm_count(), 0 without a GPU (a CPU-only caller:
// plan for the most splits).
int rule_splits(const fa::AttnParams& p, int sms, int block) {
  if (sms <= 0) return kMaxSplits;
  const long long base = (long long)p.batch * (p.heads / heads_per_group(p)) * ((group_rows(p) + block - 1) / block);
  if (base >= sms) return 1;
  const long long want = sms / base, most = std::max(1, p.seq_k / kMinSplitKeys);
  return int(std::clamp<long long>(std::min(want, most), 1, kMaxSplits));
}
// A block's rows: 16 (MF 1) or 32 (MF 2). A group of at most 16 rows: 16. A larger one (MQA's 32 query heads):
// 32, unless blocks of 16 fill more of the first wave because the split count is capped (by kMaxSplits at
// batch 1, by kMinSplitKeys on short caches): then 16, both halves of a split reading the same keys, the
// second mostly from L2. Where the wave is as full either way, 32: halves would only read every key twice.
// FA_STEP22_ROWS=16 or 32 pins it for groups of more than 16 rows (the measurements behind the rule).
std::optional<int> pinned_rows() {
  const std::optional<int> r = fa::env_int("FA_STEP22_ROWS", 16, 32, "a block's rows, 16 or 32");
  if (r && *r != 16 && *r != 32) throw fa::UsageError("FA_STEP22_ROWS=" + std::to_string(*r) + ": a block holds 16 or 32 rows");
  return r;
}
int rows_rule(const fa::AttnParams& p, int sms) {
  const int rows = group_rows(p);
  if (rows <= 16) return 16;
  if (p.variant == kRows32) return 32;
  if (const std::optional<int> r = pinned_rows()) return *r;
  auto grid = [&](int block) {  // blocks in the first wave (one per SM)
    const long long n = (long long)((rows + block - 1) / block) * rule_splits(p, sms, block);
    return sms > 0 ? std::min<long long>(n, sms) : n;
  };
  return grid(16) > grid(32) ? 16 : 32;
}
// Tiles of 128 keys (32 per warp; in 16-row blocks only, their 192 KB ring leaving no room for 32 rows): half the
// tiles, so half the barriers and waits per key, and twice the bytes in flight. Taken for a group of 32 rows
// (MQA at seq_q 1) where each split gets at least 4 of them and the halves read no key twice from DRAM: the row
// rule picks 16 rows anyway, or all of K and V fit in L2. Elsewhere they measured no faster (doc 22's history).
bool wide_tiles(const fa::AttnParams& p, int sms) {
  if (p.variant == kTiles128) return true;
  if (group_rows(p) != 32 || p.variant == kRows32 || pinned_rows() || sms <= 0) return false;
  if (p.seq_k / rule_splits(p, sms, 16) < 4 * 2 * kBlockN) return false;
  return rows_rule(p, sms) == 16 || 4.0 * p.batch * fa::kv_heads_of(p) * p.seq_k * p.head_dim <= fa::l2_bytes();
}
int block_rows(const fa::AttnParams& p, int sms) { return wide_tiles(p, sms) ? 16 : rows_rule(p, sms); }
// FA_STEP22_SPLITS=n pins the count (the tests' split paths; the measurements behind the rule), not the rows:
// a whole number from 1 to kMaxSplits, anything else a usage error (host/env.h).
std::optional<int> pinned_splits() { return fa::env_int("FA_STEP22_SPLITS", 1, kMaxSplits, "the number of splits"); }
int n_splits(const fa::AttnParams& p, int sms) {
  if (const std::optional<int> n = pinned_splits()) return *n;
  return rule_splits(p, sms, block_rows(p, sms));
}
std::size_t rows_of(const fa::AttnParams& p) { return std::size_t(p.batch) * p.heads * p.seq_q; }
std::size_t workspace_bytes(const fa::AttnParams& p) {
  const int n = n_splits(p, fa::sm_count());
  return n > 1 ? std::size_t(n) * rows_of(p) * (p.head_dim + 1) * sizeof(float) : 0;
}

// ---- launcher ---------------------------------------------------------------------------------------------

template <class T, class C>
void launch(const fa::AttnFwdArgs& a, cudaStream_t stream) {
  // Once per instance: more than 48 KB of dynamic shared memory, and how many blocks of the one-launch
  // kernel can be resident at once (its grid must be, or the barrier would wait for blocks never started).
  static const int resident = [] {
    fa::opt_in_shared_memory(decode_split<T, C>, C::SMEM_BYTES, info().name);
    fa::opt_in_shared_memory(decode_split<T, C, true>, C::SMEM_BYTES, info().name);
    int per_sm = 0;
    FA_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, decode_split<T, C, true>, kThreads,
                                                                C::SMEM_BYTES));
    return per_sm * fa::sm_count();
  }();
  const fa::AttnParams& p = a.p;
  const int kv_heads = fa::kv_heads_of(p), heads_per_kv = p.heads / kv_heads;
  const int n = n_splits(p, fa::sm_count());
  const std::size_t rows = rows_of(p);
  float* part_o = static_cast<float*>(a.workspace);
  float* part_lse = part_o ? part_o + std::size_t(n) * rows * p.head_dim : nullptr;
  if (n > 1 && !part_o)
    throw fa::UsageError(std::string(info().name) + ": needs its workspace (" + info().workspace_note + ")");
  const int group = heads_per_group(p);
  const dim3 grid(unsigned(n), unsigned(p.batch * p.heads / group), unsigned((group * p.seq_q + C::ROWS - 1) / C::ROWS));
  const T *q = static_cast<const T*>(a.q), *k = static_cast<const T*>(a.k), *v = static_cast<const T*>(a.v);
  const int* lens = p.kv_cache ? a.seq_lens : nullptr;
  T* o = static_cast<T*>(a.o);
  // One launch where there is something to merge and the grid fits at once (a pinned count may not).
  if (p.variant != kTwoLaunches && n > 1 && (long long)grid.x * grid.y * grid.z <= resident) {
    cudaLaunchAttribute cooperative{};
    cooperative.id = cudaLaunchAttributeCooperative;
    cooperative.val.cooperative = 1;
    cudaLaunchConfig_t config{};
    config.gridDim = grid, config.blockDim = dim3(kThreads), config.dynamicSmemBytes = C::SMEM_BYTES;
    config.stream = stream, config.attrs = &cooperative, config.numAttrs = 1;
    FA_CUDA_CHECK(cudaLaunchKernelEx(&config, decode_split<T, C, true>, q, k, v, lens, o, a.lse, part_o, part_lse,
                                     kv_heads, heads_per_kv, group, p.seq_q, p.seq_k, p.head_dim, p.scale, p.causal,
                                     rows));
    return;
  }
  decode_split<T, C><<<grid, kThreads, C::SMEM_BYTES, stream>>>(q, k, v, lens, o, a.lse, part_o, part_lse, kv_heads,
                                                                 heads_per_kv, group, p.seq_q, p.seq_k, p.head_dim,
                                                                 p.scale, p.causal, rows);
  FA_CHECK_LAUNCH();
  if (n == 1) return;
  const int per_block = merge_parts(n) > 1 ? 1 : kCombineThreads / kWarp;  // rows a block merges
  combine<T><<<unsigned((rows + per_block - 1) / per_block), per_block > 1 ? kCombineThreads : kThreads, 0, stream>>>(
      part_o, part_lse, o, a.lse, n, rows, p.head_dim);
  FA_CHECK_LAUNCH();
}

template <class T, int D>
void launch_rows(const fa::AttnFwdArgs& a, cudaStream_t stream) {
  if (wide_tiles(a.p, fa::sm_count()))
    launch<T, Config<D, 1, kStages, 2 * kBlockN>>(a, stream);
  else if (block_rows(a.p, fa::sm_count()) == 16)
    launch<T, Config<D, 1>>(a, stream);
  else
    launch<T, Config<D, 2>>(a, stream);
}

void forward(const fa::AttnFwdArgs& a, cudaStream_t stream) {
  fa::check_attention_launch(info(), a.p, {a.q, a.k, a.v, a.o}, "Q, K, V and O");
  if (a.p.kv_cache && !a.seq_lens)
    throw fa::UsageError(std::string(info().name) + ": a KV cache needs its sequences' lengths (seq_lens)");
  const bool f16 = a.p.dtype == fa::DType::F16;
  if (a.p.head_dim <= 64)
    f16 ? launch_rows<__half, 64>(a, stream) : launch_rows<__nv_bfloat16, 64>(a, stream);
  else
    f16 ? launch_rows<__half, 128>(a, stream) : launch_rows<__nv_bfloat16, 128>(a, stream);
}

// Decoding takes a few query rows per head; prefill belongs to the forward steps. A pinned split count
// is read here too, so that a bad one is refused before the device is opened (no GPU needed).
std::string supports(const fa::Problem& pr) {
  pinned_splits(), pinned_rows();  // throw fa::UsageError naming FA_STEP22_SPLITS or FA_STEP22_ROWS
  if (pr.attn.seq_q > kMaxSeqQ)
    return "this step decodes: seq_q at most " + std::to_string(kMaxSeqQ) + " query rows per head (got " +
           std::to_string(pr.attn.seq_q) + "; a prefill runs on steps 11-18)";
  return "";
}

// The decode benchmark shapes: one query row per head, 32 query heads of d 128 with 32, 8 and 1 K/V
// heads, batch 1, 8, 64, a KV cache of 1k to 128k keys per sequence (every sequence full, as SDPA
// runs them), K and V at most 2^30 elements (2 GiB) each: the harness draws every input on the host.
std::vector<fa::Problem> decode_sweep() {
  std::vector<fa::Problem> out;
  for (int batch : {1, 8, 64})
    for (int kv_heads : {32, 8, 1})
      for (int len : {1024, 4096, 16384, 65536, 131072}) {
        if ((long long)batch * kv_heads * len * 128 > (1LL << 30)) continue;
        fa::Problem p;
        p.family = fa::Family::Attention;
        p.attn.batch = batch, p.attn.heads = 32, p.attn.kv_heads = kv_heads == 32 ? 0 : kv_heads;
        p.attn.seq_q = 1, p.attn.seq_k = len, p.attn.head_dim = 128, p.attn.kv_cache = true;
        p.attn.scale = float(1.0 / std::sqrt(128.0));
        p.attn.dtype = fa::DType::F16;
        out.push_back(p);
      }
  return out;
}

// One token of batch 8, 32 query heads over 8 K/V heads, a 4096-key cache.
fa::Problem default_problem() {
  fa::Problem p = decode_sweep().front();
  p.attn.batch = 8, p.attn.kv_heads = 8, p.attn.seq_k = 4096;
  return p;
}

const fa::StepInfo& info() {
  static const fa::StepInfo i = [] {
    fa::StepInfo s{"22_split_kv_decode",
                   "split-KV decoding over a KV cache with per-sequence lengths; a K/V head's query heads together",
                   fa::Family::Attention};
    s.attn_fwd = forward;
    s.attn_rule = {{fa::DType::F16, fa::DType::BF16}, 128, 8};
    s.attn_rule.positive_scale = true;  // the row max on unscaled scores (step 11)
    s.attn_rule.gqa = true;
    s.attn_rule.kv_cache = true;
    s.variants = {"one-launch", "two-launches", "rows32", "unpacked", "tiles128"};  // see enum Variant
    s.supports = supports;
    s.fwd_workspace_bytes = workspace_bytes;
    s.workspace_note = "the splits' partial O and LSE, n_splits·batch·heads·seq_q·(head_dim + 1) fp32";
    s.default_problem = default_problem;
    s.sweep = decode_sweep;
    return s;
  }();
  return i;
}

}  // namespace step22
