// =============================================================================================
// FlashAttention from scratch, step by step, in CUDA C++
// Step 23: split-KV decoding over a paged KV cache: K and V in pages that a block table names
//
// What changes since step 22: where a key lives. Servers keep each sequence's cache in fixed-size pages
// of a shared pool (vLLM's PagedAttention; FlashAttention's flash_attn_with_kvcache takes the same
// layout): K and V are [num_pages, page_size, kv_heads, head_dim], and sequence b's key j is row
// j % page_size of page block_table[b][j / page_size]. A sequence grows a page at a time, anywhere in
// the pool, and no cache is ever copied to make room.
//
// The kernel is step 22's (its one launch, rules and tiles); only the K/V tile copy changes. Each thread's
// cp.async rows (16 bytes of one key, step 11's copy) come from wherever the block table puts their page: a
// tile of 64 keys may span 64 pages, any page size from 1 up. Why cp.async and not TMA: a TMA box is a
// rectangle of one tensor, so each page would need its own box (one per key at a page of 1 key). A row's
// place in the pool is found once per tile by one thread, into a table in shared memory tiles ahead, and read
// into the copying threads' registers a tile before the copy, which then issues what step 22's does.
//
// Where to look: PageDiv and PageCopy (the gather), the K/V lines of decode_split (the table of offsets and
// when each is written and read), launch (the block table passed down), and the sweep's paged shapes.
//
// Build + run:  cmake --build build --target 23_paged_kv_decode && build/bin/23_paged_kv_decode
// Read with:    docs/23_paged_kv_decode.md
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
#include "split_merge.cuh"

namespace step23 {
using namespace fa::ptx;  // step 09's ldmatrix_x4, mma_16816, pack, quad_*; step 10's cp_async_*, exp2_approx, swz

const fa::StepInfo& info();

constexpr int kWarp = 32, kWarps = 4, kThreads = kWarps * kWarp;
constexpr int kBlockN = 64;            // keys per tile: 16 per warp
constexpr int kStages = 3;             // K/V ring depth: 2 tiles in flight
constexpr int kMaxSplits = 64;         // partials per row at most (the merge reads them all)
constexpr int kMinSplitKeys = 128;     // a split attends to at least this many keys (2 tiles)
constexpr int kMaxSeqQ = 64;           // query rows per head: decoding, not prefill (steps 11-18)
constexpr float kLog2e = 1.4426950408889634f;

// ---- one instance: the head_dim, the rows of a block and a tile's keys ------------------------------------
template <int D_, int MF_, int BN_ = kBlockN>
struct Config {
  static constexpr int D = D_, MF = MF_, ROWS = 16 * MF;  // query rows per block: MF 16-row fragments
  static constexpr int BN = BN_, KW = BN / kWarps;        // keys per tile, per warp (a multiple of 16)
  static constexpr std::size_t Q_BYTES = 2 * std::size_t(ROWS) * D;
  static constexpr std::size_t RING_BYTES = 2 * std::size_t(2 * kStages * BN) * D;  // K and V, 16-bit
  static constexpr std::size_t MERGE_BYTES = 4 * std::size_t(kWarps) * ROWS * D;        // fp32 O per warp
  static constexpr std::size_t STAT_BYTES = 4 * std::size_t((2 * kWarps + 2) * ROWS);    // m, l per warp; 1/L, LSE
  static constexpr std::size_t OFFS_BYTES = 8 * std::size_t(kStages + 1) * BN;  // kStages + 1 tiles' row offsets
  // The merge reuses the ring (dead after the last tile).
  static constexpr std::size_t SMEM_BYTES = Q_BYTES + std::max(RING_BYTES, MERGE_BYTES) + OFFS_BYTES + STAT_BYTES;
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
};

// ---- new here: a K/V tile gathered from pages --------------------------------------------------------------
// j / page_size without the ~20 instructions of an integer division: the divisor is fixed per launch, so the
// host finds m with floor(j / d) = floor(j·m / 2^(31 + L)) for every j < 2^31, where L = ceil(log2 d) and
// m = ceil(2^(31 + L) / d) (Granlund and Montgomery's round-up method): on the device one multiply-high (the
// top 32 bits) and a shift by L − 1.
struct PageDiv {
  unsigned mul = 0, shift = 0;  // mul 0: d = 1, the quotient is j
  int d = 1;
  explicit PageDiv(int divisor) : d(divisor) {
    if (d == 1) return;
    unsigned lg = 0;
    while ((1u << lg) < unsigned(d)) ++lg;  // ceil(log2 d) >= 1
    mul = unsigned(((1ull << (31 + lg)) + unsigned(d) - 1) / unsigned(d)), shift = lg - 1;
  }
  __device__ __forceinline__ int quotient(int j) const { return mul ? int(__umulhi(unsigned(j), mul) >> shift) : j; }
};

// TileCopy's rows and chunks, each row's address looked up: key j of the sequence is row j % page_size of page
// pages[j / page_size] of the pool, whose rows hold all K/V heads ([page_size, kv_heads, head_dim] per page).
// One thread per row of a tile finds the row's offset (the same for K and V) into the tile's table in shared
// memory; the row's copying threads read it: a row of the copy then costs step 22's (an add, two copies).
template <int ROWS, int D>
struct PageCopy : TileCopy<ROWS, D> {
  using Base = TileCopy<ROWS, D>;
  static_assert(kThreads % ROWS == 0, "a row's offset per thread, of kThreads / ROWS tiles at once");
  // The entry of this thread's row (threadIdx.x % ROWS) of the tile at row0 (past seq: row 0's, never used).
  __device__ __forceinline__ int entry(const int* __restrict__ pages, PageDiv page, int row0, int seq) const {
    const int j = row0 + int(threadIdx.x) % ROWS;
    return pages[page.quotient(j < seq ? j : 0)];
  }
  // That row's offset, ent·page_size·row_stride + (j − p·page_size)·row_stride, into offs [ROWS] at the row's
  // slot (r % ROW_STEP)·VECS + r / ROW_STEP: a thread's rows side by side. Rows >= seq: 0, the pool's start.
  __device__ __forceinline__ void offset(std::uint64_t* offs, int ent, PageDiv page, std::size_t row_stride,
                                         int row0, int seq) const {
    const int r = threadIdx.x % ROWS, j = row0 + r, in_page = j - page.quotient(j) * page.d;
    offs[r % Base::ROW_STEP * Base::VECS + r / Base::ROW_STEP] =
        j < seq ? (std::uint64_t(unsigned(ent)) * unsigned(page.d) + unsigned(in_page)) * row_stride : 0;
  }
  using Offs = std::uint64_t[Base::VECS];  // this thread's rows' offsets of one tile, in registers
  __device__ __forceinline__ void load(Offs& at, const std::uint64_t* offs) const {
#pragma unroll
    for (int i = 0; i < Base::VECS; ++i) at[i] = offs[this->r0 * Base::VECS + i];  // row r0 + i·ROW_STEP
  }
  // The tile at row0 through its offsets; a column >= head_dim copies nothing from its row's start.
  template <class T>
  __device__ __forceinline__ void issue(T* k_dst, T* v_dst, const T* __restrict__ k, const T* __restrict__ v,
                                        const Offs& at, int row0, int seq, int head_dim) const {
    const bool col = 8 * this->c < head_dim;
    k += col ? 8 * this->c : 0, v += col ? 8 * this->c : 0;
#pragma unroll
    for (int i = 0; i < Base::VECS; ++i) {
      const int src = col && row0 + this->r0 + i * Base::ROW_STEP < seq ? 16 : 0;
      cp_async_16(k_dst + this->smem_off + i * Base::ROW_STEP * D, k + at[i], src);
      cp_async_16(v_dst + this->smem_off + i * Base::ROW_STEP * D, v + at[i], src);
    }
  }
};

// ---- the split kernel: one (split, sequence·K/V head, row block) per block ----------------------------
// Step 22's: grid (n_splits, batch·kv_heads·G/group, row blocks); a group is `group` query heads of a K/V head,
// rows r = g·seq_q + i of it rows (grp·group)·seq_q + r of Q, O and LSE. One split: O and LSE; else the partials
// part_o [n_splits, rows_total, head_dim], part_lse [n_splits, rows_total]. ONE_LAUNCH: then the grid's merge.
template <class T, class C, bool ONE_LAUNCH = false>
__global__ void __launch_bounds__(kThreads)
    decode_split(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                 const int* __restrict__ seq_lens, const int* __restrict__ block_table, PageDiv page, int max_pages,
                 T* __restrict__ o, float* __restrict__ lse,
                 float* __restrict__ part_o, float* __restrict__ part_lse, int kv_heads, int heads_per_kv, int group,
                 int seq_q, int seq_k, int head_dim, float scale, bool causal, std::size_t rows_total) {
  constexpr int D = C::D, MF = C::MF, ROWS = C::ROWS, BN = C::BN, KW = C::KW;
  const float sl2 = scale * kLog2e;  // step 10: exp(scale·(s − m)) = 2^(s·sl2 − m·sl2)
  extern __shared__ uint4 smem[];
  T* Qs = reinterpret_cast<T*>(smem);     // [ROWS, D] swizzled
  T* Ks = Qs + ROWS * D;                  // [kStages][BN, D] swizzled, a ring
  T* Vs = Ks + kStages * BN * D;          // [kStages][BN, D] swizzled
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
  // The pool's rows hold every K/V head of a key: this head's columns start kv_head·head_dim in, and the
  // sequence's pages are its row of the block table.
  const int* pages = block_table + kv_bh / kv_heads * std::size_t(max_pages);
  const std::size_t row_stride = std::size_t(kv_heads) * head_dim;
  k += kv_bh % kv_heads * head_dim, v += kv_bh % kv_heads * head_dim;
  TileCopy<ROWS, D>().issue(Qs, q, 0, n_rows - r0, head_dim);
  cp_async_commit();
  // Tiles' offsets [kSlots][BN], tile t's in slot t % kSlots: written by attend(t − 4) or earlier, read into
  // registers (`at`) in attend(t − 3), copied from in attend(t − 2): no copy waits on a shared load. All threads
  // find kPer tiles' offsets every kPer tiles, a row each: no warp holds the barrier up alone (entries a round early).
  constexpr int kSlots = kStages + 1, kPer = kThreads / BN;
  static_assert(kSlots % kPer == 0, "rounds fill whole slots");
  const int mine = threadIdx.x / BN;
  std::uint64_t* offs = reinterpret_cast<std::uint64_t*>(Ms) - kSlots * BN;
  const PageCopy<BN, D> kv_copy;
  typename PageCopy<BN, D>::Offs at;
  int ent[kSlots / kPer];
#pragma unroll
  for (int u = 0; u < kSlots / kPer; ++u) ent[u] = kv_copy.entry(pages, page, k_begin + (kPer * u + mine) * BN, k_end);
#pragma unroll
  for (int u = 0; u < kSlots / kPer; ++u)
    kv_copy.offset(offs + (kPer * u + mine) * BN, ent[u], page, row_stride, k_begin + (kPer * u + mine) * BN, k_end);
  ent[0] = kv_copy.entry(pages, page, k_begin + (kSlots + mine) * BN, k_end);
  __syncthreads();
  auto issue = [&](int t) {  // K_t and V_t of the chunk into ring slot t % kStages from `at`; rows >= k_end zero
    if (t < n_tiles)
      kv_copy.issue(Ks + t % kStages * BN * D, Vs + t % kStages * BN * D, k, v, at, k_begin + t * BN, k_end, head_dim);
    cp_async_commit();
  };
#pragma unroll
  for (int t = 0; t < kStages - 1; ++t) kv_copy.load(at, offs + t * BN), issue(t);
  kv_copy.load(at, offs + (kStages - 1) * BN);

  float acc[MF][D / 8][4];   // [ROWS, D] this warp's unnormalised O over its keys, C fragments
  float m[MF][2], l[MF][2];  // rows g, g + 8 of each fragment: running max (raw score), partial sum
#pragma unroll
  for (int mf = 0; mf < MF; ++mf) {
    m[mf][0] = m[mf][1] = -INFINITY, l[mf][0] = l[mf][1] = 0.f;
#pragma unroll
    for (int j = 0; j < D / 8; ++j) acc[mf][j][0] = acc[mf][j][1] = acc[mf][j][2] = acc[mf][j][3] = 0.f;
  }

  auto attend = [&](int t, auto masked) {
    cp_async_wait<kStages - 2>();  // this thread's copies of tile t (and of Q) have landed ...
    __syncthreads();               // ... and everyone's; every warp is done with tile t − 1
    issue(t + kStages - 1);        // into the slot tile t − 1 used
    kv_copy.load(at, offs + (t + kStages) % kSlots * BN);  // written before this barrier
    if (t % kPer == 0 && t + kSlots < n_tiles) {  // tiles t + kSlots.. where tiles t.. were (already in registers)
      const int tt = t + kSlots + mine;
      kv_copy.offset(offs + tt % kSlots * BN, ent[0], page, row_stride, k_begin + tt * BN, k_end);
      ent[0] = kv_copy.entry(pages, page, k_begin + (tt + kPer) * BN, k_end);
    }
    const T* Kt = Ks + t % kStages * BN * D + KW * warp * D;  // this warp's KW keys
    const T* Vt = Vs + t % kStages * BN * D + KW * warp * D;  // (16-row steps: the swizzle repeats every 8)

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

  // Each thread: 4 dims of a row at a time, summed over the warps; LSE = M·scale + ln L (−inf, O = 0: no key).
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
      *reinterpret_cast<uint2*>(o + row * head_dim + d) =
          make_uint2(pack<T>(sum.x, sum.y), pack<T>(sum.z, sum.w));
      if (d == 0) lse[row] = row_lse;
    } else {
      *reinterpret_cast<float4*>(part_o + (split * rows_total + row) * head_dim + d) = sum;
      if (d == 0) part_lse[split * rows_total + row] = row_lse;
    }
  }
  if constexpr (ONE_LAUNCH) {
    if (direct) return;
    cooperative_groups::this_grid().sync();  // every split's partials written, and visible (a gpu-scope fence)
    fa::split::merge_rows_of_grid<T>(part_o, part_lse, o, lse, n_splits, rows_total, head_dim,
                                     reinterpret_cast<float4*>(Ks));  // step 22's merge (split_merge.cuh)
  }
}

// ---- the number of splits ---------------------------------------------------------------------------------
// Step 22's rule: one split where batch·kv_heads·row_blocks fills the SMs; else as many as one wave of one
// block per SM holds (rounded down), each at least kMinSplitKeys keys of the capacity, at most kMaxSplits.
// The variants (StepInfo::variants, in this order): one cooperative launch (the default); the split kernel then
// the combine kernel (the same bits); unpacked (step 22's: each query head a group of its own).
enum Variant { kOneLaunch, kTwoLaunches, kUnpacked };
int heads_per_group(const fa::AttnParams& p) { return p.variant == kUnpacked ? 1 : p.heads / fa::kv_heads_of(p); }
int group_rows(const fa::AttnParams& p) { return heads_per_group(p) * p.seq_q; }
// The rule's split count for blocks of `block` rows; sms: fa::sm_count(), 0 (no GPU, a CPU-only caller): the most.
int rule_splits(const fa::AttnParams& p, int sms, int block) {
  if (sms <= 0) return kMaxSplits;
  const long long base = (long long)p.batch * (p.heads / heads_per_group(p)) * ((group_rows(p) + block - 1) / block);
  if (base >= sms) return 1;
  const long long want = sms / base, most = std::max(1, p.seq_k / kMinSplitKeys);
  return int(std::clamp<long long>(std::min(want, most), 1, kMaxSplits));
}
// A block's rows (step 22's rule): 16 for a group of at most 16 rows; a larger group 32, unless blocks of 16
// make the larger grid because the split count is capped (then both halves of a split read the same keys).
int rows_rule(const fa::AttnParams& p, int sms) {
  const int rows = group_rows(p);
  if (rows <= 16) return 16;
  auto grid = [&](int block) {  // blocks in the first wave (one per SM)
    const long long n = (long long)((rows + block - 1) / block) * rule_splits(p, sms, block);
    return sms > 0 ? std::min<long long>(n, sms) : n;
  };
  return grid(16) > grid(32) ? 16 : 32;
}
// Step 22's tiles of 128 keys (16-row blocks only): for MQA's 32 rows where each split gets 8 of them (step 22: 4;
// here 4 lost, doc 23) and the halves read no key twice from DRAM (16 rows anyway, or K and V within L2).
bool wide_tiles(const fa::AttnParams& p, int sms) {
  if (group_rows(p) != 32 || sms <= 0 || p.seq_k / rule_splits(p, sms, 16) < 8 * 2 * kBlockN) return false;
  return rows_rule(p, sms) == 16 || 4.0 * p.batch * fa::kv_heads_of(p) * p.seq_k * p.head_dim <= fa::l2_bytes();
}
int block_rows(const fa::AttnParams& p, int sms) { return wide_tiles(p, sms) ? 16 : rows_rule(p, sms); }
// FA_STEP23_SPLITS=n pins the count (the tests' split paths): 1 to kMaxSplits, else a usage error (host/env.h).
std::optional<int> pinned_splits() { return fa::env_int("FA_STEP23_SPLITS", 1, kMaxSplits, "the number of splits"); }
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
  const PageDiv page(p.page_size);  // the page of key j: j / page_size by a multiply-high
  const std::size_t rows = rows_of(p);
  float* part_o = static_cast<float*>(a.workspace);
  float* part_lse = part_o ? part_o + std::size_t(n) * rows * p.head_dim : nullptr;
  if (n > 1 && !part_o)
    throw fa::UsageError(std::string(info().name) + ": needs its workspace (" + info().workspace_note + ")");
  const int group = heads_per_group(p);
  const dim3 grid(unsigned(n), unsigned(p.batch * p.heads / group), unsigned((group * p.seq_q + C::ROWS - 1) / C::ROWS));
  const T *q = static_cast<const T*>(a.q), *k = static_cast<const T*>(a.k), *v = static_cast<const T*>(a.v);
  T* o = static_cast<T*>(a.o);
  // One launch where there is something to merge and the grid fits at once (a pinned count may not).
  if (p.variant == kOneLaunch && n > 1 && (long long)grid.x * grid.y * grid.z <= resident) {
    cudaLaunchAttribute cooperative{};
    cooperative.id = cudaLaunchAttributeCooperative, cooperative.val.cooperative = 1;
    cudaLaunchConfig_t config{};
    config.gridDim = grid, config.blockDim = dim3(kThreads), config.dynamicSmemBytes = C::SMEM_BYTES;
    config.stream = stream, config.attrs = &cooperative, config.numAttrs = 1;
    FA_CUDA_CHECK(cudaLaunchKernelEx(&config, decode_split<T, C, true>, q, k, v, a.seq_lens, a.block_table, page,
                                     p.max_pages, o, a.lse, part_o, part_lse, kv_heads, heads_per_kv, group,
                                     p.seq_q, p.seq_k, p.head_dim, p.scale, p.causal, rows));
    return;
  }
  decode_split<T, C><<<grid, kThreads, C::SMEM_BYTES, stream>>>(q, k, v, a.seq_lens, a.block_table, page,
                                                                 p.max_pages, o, a.lse, part_o, part_lse, kv_heads,
                                                                 heads_per_kv, group, p.seq_q, p.seq_k, p.head_dim,
                                                                 p.scale, p.causal, rows);
  FA_CHECK_LAUNCH();
  if (n == 1) return;
  static_assert(kWarps == fa::split::kWarps && kMaxSplits <= fa::split::kMaxSplits, "step 22's merge, its blocks");
  const int per_block = fa::split::merge_parts(n) > 1 ? 1 : fa::split::kCombineThreads / kWarp;  // rows per block
  fa::split::combine<T><<<unsigned((rows + per_block - 1) / per_block),
                          per_block > 1 ? fa::split::kCombineThreads : kThreads, 0, stream>>>(
      part_o, part_lse, o, a.lse, n, rows, p.head_dim);
  FA_CHECK_LAUNCH();
}

template <class T, int D>
void launch_rows(const fa::AttnFwdArgs& a, cudaStream_t stream) {
  if (wide_tiles(a.p, fa::sm_count()))
    launch<T, Config<D, 1, 2 * kBlockN>>(a, stream);
  else if (block_rows(a.p, fa::sm_count()) == 16)
    launch<T, Config<D, 1>>(a, stream);
  else
    launch<T, Config<D, 2>>(a, stream);
}

void forward(const fa::AttnFwdArgs& a, cudaStream_t stream) {
  fa::check_attention_launch(info(), a.p, {a.q, a.k, a.v, a.o}, "Q, K, V and O");
  if (!a.p.kv_cache || !a.seq_lens || a.p.page_size < 1 || !a.block_table)
    throw fa::UsageError(std::string(info().name) + ": reads a paged KV cache: it needs the sequences' lengths (seq_lens), "
                         "a page size and the block table");
  const bool f16 = a.p.dtype == fa::DType::F16;
  if (a.p.head_dim <= 64)
    f16 ? launch_rows<__half, 64>(a, stream) : launch_rows<__nv_bfloat16, 64>(a, stream);
  else
    f16 ? launch_rows<__half, 128>(a, stream) : launch_rows<__nv_bfloat16, 128>(a, stream);
}

// Decoding takes a few query rows per head; prefill belongs to the forward steps. A pinned split count
// is read here too, so that a bad one is refused before the device is opened (no GPU needed).
std::string supports(const fa::Problem& pr) {
  pinned_splits();  // throws fa::UsageError naming FA_STEP23_SPLITS
  if (pr.attn.page_size < 1) return "this step reads a paged KV cache only (--page-size; step 22 reads a contiguous one)";
  if (pr.attn.seq_q > kMaxSeqQ)
    return "this step decodes: seq_q at most " + std::to_string(kMaxSeqQ) + " query rows per head (got " +
           std::to_string(pr.attn.seq_q) + "; a prefill runs on steps 11-18)";
  return "";
}

// A full cache of seq_k keys per sequence in pages of `page` keys: as many pages per sequence as that takes,
// the pool all sequences' pages and 3 spare (the harness's paged_params for full lengths).
fa::AttnParams paged(fa::AttnParams a, int page) {
  a.kv_cache = true, a.page_size = page;
  a.max_pages = (a.seq_k + page - 1) / page, a.num_pages = a.batch * a.max_pages + 3;
  return a;
}

// Step 22's decode benchmark shapes (one query row per head, 32 query heads of d 128 over 32, 8 and 1 K/V
// heads, batch 1, 8, 64, full caches of 1k-128k keys, K and V at most 2^30 elements each), paged in pages
// of 16 keys and of 1 key.
std::vector<fa::Problem> decode_sweep() {
  std::vector<fa::Problem> out;
  for (int page : {16, 1})
    for (int batch : {1, 8, 64})
      for (int kv_heads : {32, 8, 1})
        for (int len : {1024, 4096, 16384, 65536, 131072}) {
          if ((long long)batch * kv_heads * len * 128 > (1LL << 30)) continue;
          fa::Problem p;
          p.family = fa::Family::Attention;
          p.attn.batch = batch, p.attn.heads = 32, p.attn.kv_heads = kv_heads == 32 ? 0 : kv_heads;
          p.attn.seq_q = 1, p.attn.seq_k = len, p.attn.head_dim = 128;
          p.attn.scale = float(1.0 / std::sqrt(128.0)), p.attn.dtype = fa::DType::F16;
          p.attn = paged(p.attn, page);
          out.push_back(p);
        }
  return out;
}

// One token of batch 8, 32 query heads over 8 K/V heads, a 4096-key cache in pages of 16 keys.
fa::Problem default_problem() {
  fa::Problem p = decode_sweep().front();
  p.attn.batch = 8, p.attn.kv_heads = 8, p.attn.seq_k = 4096;
  p.attn = paged(p.attn, 16);
  return p;
}

const fa::StepInfo& info() {
  static const fa::StepInfo i = [] {
    fa::StepInfo s{"23_paged_kv_decode",
                   "split-KV decoding over a paged KV cache: K/V rows gathered through a block table by cp.async",
                   fa::Family::Attention};
    s.attn_fwd = forward;
    s.attn_rule = {{fa::DType::F16, fa::DType::BF16}, 128, 8};
    s.attn_rule.positive_scale = true;  // the row max on unscaled scores (step 11)
    s.attn_rule.gqa = s.attn_rule.kv_cache = s.attn_rule.paged = true;
    s.variants = {"one-launch", "two-launches", "unpacked"};  // see enum Variant
    s.supports = supports;
    s.fwd_workspace_bytes = workspace_bytes;
    s.workspace_note = "the splits' partial O and LSE, n_splits·batch·heads·seq_q·(head_dim + 1) fp32";
    s.default_problem = default_problem;
    s.sweep = decode_sweep;
    return s;
  }();
  return i;
}

}  // namespace step23
