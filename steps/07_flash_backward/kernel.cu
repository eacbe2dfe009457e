// =============================================================================================
// FlashAttention from scratch, step by step, in CUDA C++
// Step 07: the FlashAttention-2 backward in fp32, without atomics: two kernels, each owning its
//          outputs
//
// The forward is step 06's (it writes O and the row log-sum-exp LSE). The backward gets Q, K, V,
// O, dO and LSE and recomputes everything else tile by tile, on chip, never storing S or P:
//
//   dK/dV kernel   grid (key block, batch·head). Keeps K_j, V_j and the accumulators dK_j, dV_j;
//                  walks the query tiles i:   S = scale·Q_i·K_jᵀ,  P = exp(S − LSE_i),
//                  delta_i = rowsum(dO_i ∘ O_i) (from its own load of O_i), dV_j += Pᵀ·dO_i,
//                  dP = dO_i·V_jᵀ,  dS = P ∘ (dP − delta_i),  dK_j += scale·dSᵀ·Q_i.
//   dQ kernel      grid (query block, batch·head). Keeps Q_i, dO_i, delta_i and the accumulator
//                  dQ_i; walks the key tiles j:  S, P, dP, dS as above,  dQ_i += scale·dS·K_j.
//
// Each kernel writes its outputs once, so no atomics and no zero-initialised buffers; the price
// is that S, P and dP are computed in both kernels (7 tile products per tile pair instead of 5).
// Nothing orders the two kernels either, so the launcher runs them side by side (two streams).
// Causal: step 06's stages. The dQ kernel skips the key tiles after its diagonal (heaviest query
// block first); the dK/dV kernel starts its query loop at its diagonal; only diagonal tiles mask.
//
// Every product is a small GEMM on tiles in shared memory, register-blocked as in steps 03-06.
// Two kinds, by where the contraction runs (see gemm_nt and gemm_tn):
//   NT  S = Q·Kᵀ, dP = dO·Vᵀ: both tiles row-major, float4 along head_dim; thread tile [R, C].
//   TN  dV += Pᵀ·dO, dK += dSᵀ·Q (over the tile's queries), dQ += dS·K (over the keys): one row
//       of each operand per step, float4 chunks of rows and columns; thread tile [R, C].
// Tiles are 64 queries × 64 keys in both kernels and both instances:
//   head_dim ≤ 64  (instance 64):  128 threads, 2 blocks per SM. S, dP: 8×4 per thread;
//                                  dK, dV, dQ: 8×4 per thread each.
//                                  Shared memory: dK/dV 104,960 B, dQ 88,576 B.
//   head_dim ≤ 128 (instance 128): 256 threads, 1 block per SM (the tiles of 128 floats per row
//                                  leave no room for two). S, dP: 4×4; dK, dV, dQ: 4×8.
//                                  Shared memory: dK/dV 170,496 B, dQ 154,112 B.
// The next tile (dK/dV: Q, dO, O and LSE; dQ: K and V) is fetched into registers while the
// accumulating product runs, and stored to shared memory after it, so the device-memory latency
// hides behind it.
// Whole tiles load without bounds checks (one base pointer, immediate offsets; only a ragged last
// tile takes the checked path), and the inner loops of the products are software-pipelined.
// Registers per thread: profiles/h100/ptxas.csv (generated from the build; no spills), near the
// 255 limit in both kernels. Occupancy: 8 warps per SM (of 64) in both instances.
// exp: expf, as in steps 05-06 (exp2 with log2(e) folded into the scale comes in step 10).
//
// Build + run:  cmake --build build --target 07_flash_backward && build/bin/07_flash_backward
// Read with:    docs/07_flash_backward.md
// =============================================================================================
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "check.h"
#include "launch.h"
#include "ops.h"
#include "streams.h"

namespace step06 {
const fa::StepInfo& info();  // the forward of this step
}  // namespace step06

namespace step07 {

const fa::StepInfo& info();  // bottom of the file: the step's name for messages

constexpr int kWarp = 32;

// ---- tile configuration, per head-dim instance -------------------------------------------------
template <int D>
struct Config {
  // d = 64: 4 warps and two blocks per SM, as in step 06. d = 128: a 64-row tile of 128 floats per
  // row is 33 KB; the dK/dV kernel holds four of them, so one block per SM, of 8 warps.
  static constexpr int THREADS = D == 64 ? 128 : 256;
  static constexpr int MIN_BLOCKS = D == 64 ? 2 : 1;
  static constexpr int BLOCK_M = 64;  // queries per tile
  static constexpr int BLOCK_N = 64;  // keys per tile
  // S and dP [BLOCK_M, BLOCK_N]: [S_ROWS, S_COLS] per thread. dK, dV [BLOCK_N, D] and dQ
  // [BLOCK_M, D]: [ACC_ROWS, ACC_COLS] per thread. Both on one grid of ROW_GROUPS × COL_GROUPS.
  static constexpr int S_ROWS = D == 64 ? 8 : 4;
  static constexpr int S_COLS = 4;
  static constexpr int ACC_ROWS = D == 64 ? 8 : 4;
  static constexpr int ACC_COLS = D == 64 ? 4 : 8;
  static constexpr int ROW_GROUPS = BLOCK_M / S_ROWS;  // 8 | 16
  static constexpr int COL_GROUPS = BLOCK_N / S_COLS;  // 16 | 16
  // Row strides in shared memory (floats). LD ≡ 4 (mod 32): the 8 rows a warp reads at once in
  // the NT products start 4 banks apart, so its 8 float4 cover the 32 banks once. LD_P ≡ 4 and
  // LD_DST ≡ 8 (mod 32) make the scalar stores of P, dS and dSᵀ conflict-free (see lane_layout).
  static constexpr int LD = D + 4;
  static constexpr int LD_P = BLOCK_N + 4;
  static constexpr int LD_DST = BLOCK_M + 8;
  static constexpr int Q_FLOATS = BLOCK_M * LD;        // Q, dO [BLOCK_M, LD]
  static constexpr int K_FLOATS = BLOCK_N * LD;        // K, V  [BLOCK_N, LD]
  static constexpr int P_FLOATS = BLOCK_M * LD_P;      // P, dS [BLOCK_M, LD_P]   (dK/dV kernel)
  static constexpr int DST_FLOATS = BLOCK_N * LD_DST;  // dSᵀ [BLOCK_N, LD_DST] (dQ kernel)
  static constexpr std::size_t DKDV_SMEM_BYTES =
      sizeof(float) * (2 * Q_FLOATS + 2 * K_FLOATS + 2 * P_FLOATS + 2 * BLOCK_M);
  static constexpr std::size_t DQ_SMEM_BYTES = sizeof(float) * (2 * Q_FLOATS + 2 * K_FLOATS + DST_FLOATS + 2 * BLOCK_M);

  static_assert(D == 64 || D == 128, "instances: head_dim padded to 64 or 128");
  static_assert(ROW_GROUPS * COL_GROUPS == THREADS, "one S tile per thread");
  static_assert(S_ROWS * ROW_GROUPS == BLOCK_M && S_COLS * COL_GROUPS == BLOCK_N, "S tiles cover the block");
  static_assert(ACC_ROWS * ROW_GROUPS == BLOCK_N && ACC_ROWS * ROW_GROUPS == BLOCK_M && ACC_COLS * COL_GROUPS == D,
                "dK, dV [BLOCK_N, D] and dQ [BLOCK_M, D] on the same thread grid as S");
  static_assert(ROW_GROUPS % 8 == 0 && COL_GROUPS % 4 == 0, "a warp is 8 row groups x 4 column groups");
  static_assert(ACC_ROWS % 4 == 0 && ACC_COLS % 4 == 0, "float4 chunks of the accumulator tiles");
  static_assert(LD % 32 == 4 && LD_P % 32 == 4 && LD_DST % 32 == 8, "bank offsets of the strides, see above");
  static_assert(BLOCK_M <= THREADS, "one thread per row loads LSE");
  static_assert(MIN_BLOCKS * (DKDV_SMEM_BYTES + 1024) <= 228 * 1024,
                "blocks per SM on sm_90 (1 KB reserved per block)");
};

// ---- who owns what -------------------------------------------------------------------------------
// Thread (rg, cg) of the ROW_GROUPS × COL_GROUPS grid. A warp holds 8 consecutive row groups
// and 4 consecutive column groups, placed as in step 05: the row group from lane bits 1-3, the
// column group from lane bits 0 and 4. So lanes n and n^1 always share a row group and lanes n
// and n^2 a column group, and every float4 load of the products reads one address per pair of
// lanes. Why that matters: shared memory returns 128 bytes per cycle, one 32-bit register to each
// of 32 lanes, so a warp's LDS.128 costs 4 cycles however many lanes read the same address; only
// paired lanes let it pack two lanes' registers into one slot, and then it costs 2 cycles.
template <int ROW_GROUPS>
__device__ __forceinline__ void lane_layout(int& rg, int& cg) {
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  constexpr int WARPS_PER_COLUMN = ROW_GROUPS / 8;
  rg = (warp % WARPS_PER_COLUMN) * 8 + ((lane >> 1) & 7);                  // bits 1-3: n^1 pairs
  cg = (warp / WARPS_PER_COLUMN) * 4 + ((lane & 1) | ((lane >> 4) << 1));  // bits 0, 4: n^2 pairs
}

// The accumulator tiles (TN products) own float4 chunks 4·GROUPS apart, as in step 06: element e
// of group g is row (or column) chunk(g, e), so a warp's groups read one contiguous run.
template <int GROUPS>
__device__ __forceinline__ int chunk(int g, int e) {
  return (e / 4) * 4 * GROUPS + 4 * g + e % 4;
}

__device__ __forceinline__ float4 lds4(const float* p) { return *reinterpret_cast<const float4*>(p); }
__device__ __forceinline__ void put4(float* a, float4 v) { a[0] = v.x, a[1] = v.y, a[2] = v.z, a[3] = v.w; }

// ---- device memory -> shared memory, through registers ----------------------------------------------
// A [ROWS, D] tile of one head's [seq, head_dim] matrix. fetch() issues the loads (all in flight
// at once), store() writes the tile to shared memory, row-major with row stride D + 4. Rows >= seq
// and columns >= head_dim read as 0. D/4 consecutive threads load one row: a warp reads whole rows
// (coalesced), and the threads of a row can add up a row dot product with a few shuffles.
template <int ROWS, int D, int THREADS>
struct TileLoad {
  static constexpr int PER_ROW = D / 4;                  // float4 per row
  static constexpr int VECS = ROWS * PER_ROW / THREADS;  // float4 per thread
  static_assert(ROWS * PER_ROW % THREADS == 0 && THREADS % PER_ROW == 0 && PER_ROW <= kWarp,
                "whole rows per pass, a row within one warp");
  float4 v[VECS];

  __device__ static int row_of(int i) { return threadIdx.x / PER_ROW + i * (THREADS / PER_ROW); }
  __device__ static int col_of() { return 4 * (threadIdx.x % PER_ROW); }

  __device__ void fetch(const float* __restrict__ src, int row0, int seq, int head_dim) {
    const int c = col_of();
    if (row0 + ROWS <= seq && head_dim == D) {
      // A whole tile (all but a ragged last one): no bounds checks, and with the row pitch known
      // at compile time every load is one base pointer plus a constant offset (LDG [R+imm]).
      const float* p = src + std::size_t(row0 + row_of(0)) * D + c;
#pragma unroll
      for (int i = 0; i < VECS; ++i) v[i] = *reinterpret_cast<const float4*>(p + i * (THREADS / PER_ROW) * D);
    } else {
#pragma unroll
      for (int i = 0; i < VECS; ++i) {
        const int r = row0 + row_of(i);
        v[i] = r < seq && c < head_dim ? *reinterpret_cast<const float4*>(src + std::size_t(r) * head_dim + c)
                                       : make_float4(0.f, 0.f, 0.f, 0.f);
      }
    }
  }
  __device__ void scale(float s) {
#pragma unroll
    for (int i = 0; i < VECS; ++i) v[i].x *= s, v[i].y *= s, v[i].z *= s, v[i].w *= s;
  }
  __device__ void store(float* dst) const {
#pragma unroll
    for (int i = 0; i < VECS; ++i) *reinterpret_cast<float4*>(dst + row_of(i) * (D + 4) + col_of()) = v[i];
  }
};

// delta_i = rowsum(dO_i ∘ O_i) for every row of a tile, from the registers of its dO and O loads:
// each thread multiplies its float4 pairs, the D/4 threads of a row add up with shuffles.
template <int ROWS, int D, int THREADS>
__device__ __forceinline__ void row_dots(const TileLoad<ROWS, D, THREADS>& dout, const TileLoad<ROWS, D, THREADS>& o,
                                         float* delta_s) {
  using T = TileLoad<ROWS, D, THREADS>;
#pragma unroll
  for (int i = 0; i < T::VECS; ++i) {
    float x = dout.v[i].x * o.v[i].x;
    x = fmaf(dout.v[i].y, o.v[i].y, x);
    x = fmaf(dout.v[i].z, o.v[i].z, x);
    x = fmaf(dout.v[i].w, o.v[i].w, x);
#pragma unroll
    for (int off = T::PER_ROW / 2; off > 0; off /= 2) x += __shfl_xor_sync(0xffffffffu, x, off);
    if (T::col_of() == 0) delta_s[T::row_of(i)] = x;
  }
}

// The LSE that P = exp(S − LSE) uses for a row: +inf for rows past seq_q, and for a row whose LSE
// is −inf (no visible key: it attends to nothing and gets no gradient). exp(S − ∞) = 0, never NaN.
__device__ __forceinline__ float lse_for_p(const float* __restrict__ lse, int row, int seq_q) {
  const float l = row < seq_q ? lse[row] : INFINITY;
  return l == -INFINITY ? INFINITY : l;
}

// One query tile in flight: Q, dO and LSE in registers between fetch() and store().
template <int D>
struct QueryTile {
  using C = Config<D>;
  TileLoad<C::BLOCK_M, D, C::THREADS> q, dout;
  float lse;

  __device__ void fetch(const float* qg, const float* dog, const float* lseg, int m0, int seq_q, int head_dim) {
    q.fetch(qg, m0, seq_q, head_dim);
    dout.fetch(dog, m0, seq_q, head_dim);
    if (threadIdx.x < C::BLOCK_M) lse = lse_for_p(lseg, m0 + threadIdx.x, seq_q);
  }
  // Q pre-multiplied by the scale: S = (scale·Q)·Kᵀ as in the forward, and dK = dSᵀ·(scale·Q).
  // delta from dO (registers) and O, loaded here, when it is needed: 32 more registers per thread
  // in flight with the prefetched tile made ptxas spill, so this load's latency is not hidden.
  __device__ void store(float* Qs, float* dOs, float* lse_s, float* delta_s, float scale, const float* og, int m0,
                        int seq_q, int head_dim) {
    TileLoad<C::BLOCK_M, D, C::THREADS> o;
    o.fetch(og, m0, seq_q, head_dim);
    q.scale(scale);
    q.store(Qs);
    dout.store(dOs);
    row_dots(dout, o, delta_s);
    if (threadIdx.x < C::BLOCK_M) lse_s[threadIdx.x] = lse;
  }
};

// One key tile in flight: K and V in registers.
template <int D>
struct KeyTile {
  using C = Config<D>;
  TileLoad<C::BLOCK_N, D, C::THREADS> k, v;
  __device__ void fetch(const float* kg, const float* vg, int n0, int seq_k, int head_dim) {
    k.fetch(kg, n0, seq_k, head_dim);
    v.fetch(vg, n0, seq_k, head_dim);
  }
  __device__ void store(float* Ks, float* Vs) const {
    k.store(Ks);
    v.store(Vs);
  }
};

// ---- the products ------------------------------------------------------------------------------------
// All three loops are software-pipelined by hand, as in step 05: the shared-memory loads of step
// k+1 go into a second set of registers while the FFMAs of step k run on the first, so no step
// waits for shared memory. The last step loads step 0 again: a harmless read that keeps the
// loop free of branches.

// NT: acc [R, C] = this thread's piece of A·Bᵀ, A [*, LD] and B [*, LD] row-major, contracted over
// D: rows rg + RG·r of A, rows cg + CG·c of B. Per 4 columns: R + C float4 loads, 4·R·C FFMAs.
// The sum runs over d in order, as in step 06's forward: the same S, to the last bit.
template <int D, int R, int C, int RG, int CG>
__device__ __forceinline__ void gemm_nt(const float* A, const float* B, int rg, int cg, float (&acc)[R][C]) {
  constexpr int LD = D + 4;
  const float* a0 = A + rg * LD;      // this thread's first row of A, at d = 0
  const float* b0 = B + cg * LD;      // this thread's first row of B, at d = 0
  float4 aa[R], ba[C], ab[R], bb[C];  // registers: 4 columns of this thread's rows of A and of B, twice
  auto load = [&](int d, float4(&a)[R], float4(&b)[C]) {
#pragma unroll
    for (int r = 0; r < R; ++r) a[r] = lds4(a0 + RG * r * LD + d);
#pragma unroll
    for (int c = 0; c < C; ++c) b[c] = lds4(b0 + CG * c * LD + d);
  };
  auto step = [&](const float4(&a)[R], const float4(&b)[C]) {
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int c = 0; c < C; ++c) acc[r][c] = fmaf(a[r].x, b[c].x, acc[r][c]);
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int c = 0; c < C; ++c) acc[r][c] = fmaf(a[r].y, b[c].y, acc[r][c]);
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int c = 0; c < C; ++c) acc[r][c] = fmaf(a[r].z, b[c].z, acc[r][c]);
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int c = 0; c < C; ++c) acc[r][c] = fmaf(a[r].w, b[c].w, acc[r][c]);
  };
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int c = 0; c < C; ++c) acc[r][c] = 0.f;
  load(0, aa, ba);
#pragma unroll 2
  for (int d = 0; d < D; d += 8) {
    load(d + 4, ab, bb), step(aa, ba);
    load((d + 8) % D, aa, ba), step(ab, bb);
  }
}

// TN: acc [R, C] += this thread's piece of Aᵀ·B, A [K, LDA] and B [K, LDB] row-major, contracted
// over their K rows: columns chunk(rg, r) of A, chunk(cg, c) of B. Per row: (R + C)/4 float4
// loads, R·C FFMAs. With two pairs (A1, B1 -> acc1 and A2, B2 -> acc2) in one loop: dV and dK.
template <int LDA, int LDB, int R, int C, int RG, int CG>
__device__ __forceinline__ void tn_load(const float* A, const float* B, int k, int rg, int cg, float (&a)[R],
                                        float (&b)[C]) {
#pragma unroll
  for (int e = 0; e < R; e += 4) put4(a + e, lds4(A + k * LDA + chunk<RG>(rg, e)));
#pragma unroll
  for (int e = 0; e < C; e += 4) put4(b + e, lds4(B + k * LDB + chunk<CG>(cg, e)));
}
template <int R, int C>
__device__ __forceinline__ void tn_step(const float (&a)[R], const float (&b)[C], float (&acc)[R][C]) {
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int c = 0; c < C; ++c) acc[r][c] = fmaf(a[r], b[c], acc[r][c]);
}
template <int K, int LDA, int LDB, int R, int C, int RG, int CG>
__device__ __forceinline__ void gemm_tn(const float* A, const float* B, int rg, int cg, float (&acc)[R][C]) {
  float aa[R], ba[C], ab[R], bb[C];
  tn_load<LDA, LDB, R, C, RG, CG>(A, B, 0, rg, cg, aa, ba);
#pragma unroll 4
  for (int k = 0; k < K; k += 2) {
    tn_load<LDA, LDB, R, C, RG, CG>(A, B, k + 1, rg, cg, ab, bb), tn_step(aa, ba, acc);
    tn_load<LDA, LDB, R, C, RG, CG>(A, B, (k + 2) % K, rg, cg, aa, ba), tn_step(ab, bb, acc);
  }
}
template <int K, int LDA, int LDB, int R, int C, int RG, int CG>
__device__ __forceinline__ void gemm_tn2(const float* A1, const float* B1, float (&acc1)[R][C], const float* A2,
                                         const float* B2, float (&acc2)[R][C], int rg, int cg) {
  float a1a[R], b1a[C], a2a[R], b2a[C], a1b[R], b1b[C], a2b[R], b2b[C];
  tn_load<LDA, LDB, R, C, RG, CG>(A1, B1, 0, rg, cg, a1a, b1a);
  tn_load<LDA, LDB, R, C, RG, CG>(A2, B2, 0, rg, cg, a2a, b2a);
#pragma unroll 2
  for (int k = 0; k < K; k += 2) {
    tn_load<LDA, LDB, R, C, RG, CG>(A1, B1, k + 1, rg, cg, a1b, b1b), tn_step(a1a, b1a, acc1);
    tn_load<LDA, LDB, R, C, RG, CG>(A2, B2, k + 1, rg, cg, a2b, b2b), tn_step(a2a, b2a, acc2);
    tn_load<LDA, LDB, R, C, RG, CG>(A1, B1, (k + 2) % K, rg, cg, a1a, b1a), tn_step(a1b, b1b, acc1);
    tn_load<LDA, LDB, R, C, RG, CG>(A2, B2, (k + 2) % K, rg, cg, a2a, b2a), tn_step(a2b, b2b, acc2);
  }
}

// ---- the dK/dV kernel: one key block, every query tile that sees it ---------------------------------------
// grid (key blocks, batch·heads); block THREADS. D: head_dim padded up to the instance.
template <int D>
__global__ void __launch_bounds__(Config<D>::THREADS, Config<D>::MIN_BLOCKS)
    backward_dkdv(const float* __restrict__ q, const float* __restrict__ k, const float* __restrict__ v,
                  const float* __restrict__ o, const float* __restrict__ dout, const float* __restrict__ lse,
                  float* __restrict__ dk, float* __restrict__ dv, int seq_q, int seq_k, int head_dim, float scale,
                  bool causal) {
  using C = Config<D>;
  constexpr int M = C::BLOCK_M, N = C::BLOCK_N, RG = C::ROW_GROUPS, CG = C::COL_GROUPS;
  extern __shared__ float4 smem4[];             // float4: 16-byte alignment for the vector accesses
  float* Qs = reinterpret_cast<float*>(smem4);  // [BLOCK_M, LD]   scale·Q tile
  float* dOs = Qs + C::Q_FLOATS;                // [BLOCK_M, LD]   dO tile
  float* Ks = dOs + C::Q_FLOATS;                // [BLOCK_N, LD]   this block's keys (whole kernel)
  float* Vs = Ks + C::K_FLOATS;                 // [BLOCK_N, LD]   this block's values (whole kernel)
  float* Ps = Vs + C::K_FLOATS;                 // [BLOCK_M, LD_P] P tile
  float* dSs = Ps + C::P_FLOATS;                // [BLOCK_M, LD_P] dS tile
  float* lse_s = dSs + C::P_FLOATS;             // [BLOCK_M]       LSE of the tile's rows (+inf: P = 0)
  float* delta_s = lse_s + M;                   // [BLOCK_M]       delta of the tile's rows

  const int n0 = blockIdx.x * N;      // first key of this block
  const std::size_t bh = blockIdx.y;  // flattened (batch, head)
  q += bh * seq_q * head_dim, o += bh * seq_q * head_dim, dout += bh * seq_q * head_dim, lse += bh * seq_q;
  k += bh * seq_k * head_dim, v += bh * seq_k * head_dim;
  int rg, cg;
  lane_layout<RG>(rg, cg);

  // The query tiles that see this key block. Causal: query i sees key j iff j <= i, so tiles
  // before t_begin (every query < n0) see nothing and are skipped; tiles from t_full on (first
  // query >= the block's last key) see every key, unmasked; the tiles between hold the diagonal.
  // Keys >= seq_k need no mask here: their rows of dK and dV are never stored.
  const int n_q_tiles = (seq_q + M - 1) / M;
  const int t_begin = causal ? min(n0 / M, n_q_tiles) : 0;
  const int t_full = causal ? min((min(n0 + N, seq_k) - 1 + M - 1) / M, n_q_tiles) : 0;

  {  // K_j, V_j for the whole kernel, and the first query tile
    KeyTile<D> kv;
    QueryTile<D> first;
    kv.fetch(k, v, n0, seq_k, head_dim);
    if (t_begin < n_q_tiles) first.fetch(q, dout, lse, t_begin * M, seq_q, head_dim);
    kv.store(Ks, Vs);
    if (t_begin < n_q_tiles) first.store(Qs, dOs, lse_s, delta_s, scale, o, t_begin * M, seq_q, head_dim);
  }
  __syncthreads();

  float dk_acc[C::ACC_ROWS][C::ACC_COLS];  // [ACC_ROWS, ACC_COLS] of dK_j, registers
  float dv_acc[C::ACC_ROWS][C::ACC_COLS];  // [ACC_ROWS, ACC_COLS] of dV_j, registers
#pragma unroll
  for (int r = 0; r < C::ACC_ROWS; ++r)
#pragma unroll
    for (int c = 0; c < C::ACC_COLS; ++c) dk_acc[r][c] = dv_acc[r][c] = 0.f;

  // One query tile: P and dS on chip, then dV += Pᵀ·dO and dK += dSᵀ·(scale·Q).
  auto query_tile = [&](int t, auto masked) {
    const int m0 = t * M;                                         // first query of this tile
    float s[C::S_ROWS][C::S_COLS];                                // [S_ROWS, S_COLS] registers: S, then dP
    gemm_nt<D, C::S_ROWS, C::S_COLS, RG, CG>(Qs, Ks, rg, cg, s);  // S = (scale·Q)·Kᵀ
#pragma unroll
    for (int r = 0; r < C::S_ROWS; ++r) {
      const float l = lse_s[rg + RG * r];
#pragma unroll
      for (int c = 0; c < C::S_COLS; ++c) {
        // Diagonal tiles only (masked is std::true_type there): key after query -> P = 0.
        const bool hidden = decltype(masked)::value && n0 + cg + CG * c > m0 + rg + RG * r;
        // P recomputed from the forward's LSE, straight to shared memory: its registers are
        // needed for dP (this thread reads its own P back below).
        Ps[(rg + RG * r) * C::LD_P + cg + CG * c] = hidden ? 0.f : expf(s[r][c] - l);
      }
    }
    gemm_nt<D, C::S_ROWS, C::S_COLS, RG, CG>(dOs, Vs, rg, cg, s);  // dP = dO·Vᵀ
#pragma unroll
    for (int r = 0; r < C::S_ROWS; ++r) {
      const float delta = delta_s[rg + RG * r];
#pragma unroll
      for (int c = 0; c < C::S_COLS; ++c) {  // dS = P ∘ (dP − delta)
        const int at = (rg + RG * r) * C::LD_P + cg + CG * c;
        dSs[at] = Ps[at] * (s[r][c] - delta);
      }
    }
    __syncthreads();  // P and dS are in shared memory

    const bool more = t + 1 < n_q_tiles;
    QueryTile<D> next;  // the next Q and dO tiles' loads fly while the products below run
    if (more) next.fetch(q, dout, lse, m0 + M, seq_q, head_dim);
    gemm_tn2<M, C::LD_P, C::LD, C::ACC_ROWS, C::ACC_COLS, RG, CG>(Ps, dOs, dv_acc, dSs, Qs, dk_acc, rg, cg);
    __syncthreads();  // everyone is done with Q, dO, P and dS of this tile
    if (more) next.store(Qs, dOs, lse_s, delta_s, scale, o, m0 + M, seq_q, head_dim);
    __syncthreads();  // the next tile is in
  };
  int t = t_begin;
  for (; t < t_full; ++t) query_tile(t, std::true_type{});      // the diagonal: masked
  for (; t < n_q_tiles; ++t) query_tile(t, std::false_type{});  // below it (all of them if not causal)

  // dK_j and dV_j, once. Rows past seq_k and columns past head_dim are not stored.
  dk += bh * seq_k * head_dim, dv += bh * seq_k * head_dim;
#pragma unroll
  for (int r = 0; r < C::ACC_ROWS; ++r) {
    const int key = n0 + chunk<RG>(rg, r);
    if (key >= seq_k) continue;
#pragma unroll
    for (int c = 0; c < C::ACC_COLS; c += 4) {
      const int col = chunk<CG>(cg, c);
      if (col >= head_dim) continue;
      *reinterpret_cast<float4*>(dk + std::size_t(key) * head_dim + col) =
          make_float4(dk_acc[r][c], dk_acc[r][c + 1], dk_acc[r][c + 2], dk_acc[r][c + 3]);
      *reinterpret_cast<float4*>(dv + std::size_t(key) * head_dim + col) =
          make_float4(dv_acc[r][c], dv_acc[r][c + 1], dv_acc[r][c + 2], dv_acc[r][c + 3]);
    }
  }
}

// ---- the dQ kernel: one query block, every key tile it sees ----------------------------------------------
// grid (query blocks, batch·heads); block THREADS.
template <int D>
__global__ void __launch_bounds__(Config<D>::THREADS, Config<D>::MIN_BLOCKS)
    backward_dq(const float* __restrict__ q, const float* __restrict__ k, const float* __restrict__ v,
                const float* __restrict__ o, const float* __restrict__ dout, const float* __restrict__ lse,
                float* __restrict__ dq, int seq_q, int seq_k, int head_dim, float scale, bool causal) {
  using C = Config<D>;
  constexpr int M = C::BLOCK_M, N = C::BLOCK_N, RG = C::ROW_GROUPS, CG = C::COL_GROUPS;
  extern __shared__ float4 smem4[];
  float* Qs = reinterpret_cast<float*>(smem4);  // [BLOCK_M, LD]     scale·Q (whole kernel)
  float* dOs = Qs + C::Q_FLOATS;                // [BLOCK_M, LD]     dO (whole kernel)
  float* Ks = dOs + C::Q_FLOATS;                // [BLOCK_N, LD]     K tile
  float* Vs = Ks + C::K_FLOATS;                 // [BLOCK_N, LD]     V tile
  float* dSt = Vs + C::K_FLOATS;                // [BLOCK_N, LD_DST] dS tile, transposed
  float* lse_s = dSt + C::DST_FLOATS;           // [BLOCK_M]
  float* delta_s = lse_s + M;                   // [BLOCK_M]

  // Causal: the last query block (the most key tiles) runs first, as in step 06.
  const int qb = causal ? gridDim.x - 1 - blockIdx.x : blockIdx.x;
  const int m0 = qb * M;              // first query of this block
  const std::size_t bh = blockIdx.y;  // flattened (batch, head)
  q += bh * seq_q * head_dim, o += bh * seq_q * head_dim, dout += bh * seq_q * head_dim, lse += bh * seq_q;
  k += bh * seq_k * head_dim, v += bh * seq_k * head_dim;
  int rg, cg;
  lane_layout<RG>(rg, cg);

  // Step 06's stages: tiles [0, n_full) are seen whole by every row of the block, unmasked; tiles
  // [n_full, n_tiles) hold the diagonal or the end of the keys, masked; the rest never run.
  const int kv_end = causal ? min(seq_k, min(m0 + M, seq_q)) : seq_k;  // keys any row can see
  const int n_tiles = (kv_end + N - 1) / N;
  const int n_full = (causal ? min(m0 + 1, seq_k) : seq_k) / N;

  {  // Q_i, dO_i, delta_i, LSE_i for the whole kernel, and the first key tile
    QueryTile<D> qt;
    KeyTile<D> kv;
    qt.fetch(q, dout, lse, m0, seq_q, head_dim);
    kv.fetch(k, v, 0, seq_k, head_dim);
    qt.store(Qs, dOs, lse_s, delta_s, scale, o, m0, seq_q, head_dim);
    kv.store(Ks, Vs);
  }
  __syncthreads();

  float dq_acc[C::ACC_ROWS][C::ACC_COLS];  // [ACC_ROWS, ACC_COLS] of dS·K, registers
#pragma unroll
  for (int r = 0; r < C::ACC_ROWS; ++r)
#pragma unroll
    for (int c = 0; c < C::ACC_COLS; ++c) dq_acc[r][c] = 0.f;

  // One key tile: P and dS on chip, then dQ += dS·K.
  auto key_tile = [&](int t, auto masked) {
    const int n0 = t * N;                                         // first key of this tile
    float p[C::S_ROWS][C::S_COLS], ds[C::S_ROWS][C::S_COLS];      // [S_ROWS, S_COLS] registers
    gemm_nt<D, C::S_ROWS, C::S_COLS, RG, CG>(Qs, Ks, rg, cg, p);  // S = (scale·Q)·Kᵀ
#pragma unroll
    for (int r = 0; r < C::S_ROWS; ++r) {
      const int row = m0 + rg + RG * r;
      const int visible = causal ? min(row + 1, seq_k) : seq_k;  // this row sees keys [0, visible)
      const float l = lse_s[rg + RG * r];
#pragma unroll
      for (int c = 0; c < C::S_COLS; ++c) {
        // Masked tiles only: keys after the query or past seq_k (their K rows are zeros, but
        // exp(0 − LSE) may overflow, and inf·0 is NaN).
        const bool hidden = decltype(masked)::value && n0 + cg + CG * c >= visible;
        p[r][c] = hidden ? 0.f : expf(p[r][c] - l);
      }
    }
    gemm_nt<D, C::S_ROWS, C::S_COLS, RG, CG>(dOs, Vs, rg, cg, ds);  // dP = dO·Vᵀ
#pragma unroll
    for (int r = 0; r < C::S_ROWS; ++r) {
      const float delta = delta_s[rg + RG * r];
#pragma unroll
      for (int c = 0; c < C::S_COLS; ++c)  // dS = P ∘ (dP − delta), stored transposed
        dSt[(cg + CG * c) * C::LD_DST + rg + RG * r] = p[r][c] * (ds[r][c] - delta);
    }
    __syncthreads();  // dSᵀ is in shared memory

    const bool more = t + 1 < n_tiles;
    KeyTile<D> next;  // the next K and V tiles' loads fly while dS·K runs
    if (more) next.fetch(k, v, n0 + N, seq_k, head_dim);
    gemm_tn<N, C::LD_DST, C::LD, C::ACC_ROWS, C::ACC_COLS, RG, CG>(dSt, Ks, rg, cg, dq_acc);
    __syncthreads();  // everyone is done with K, V and dSᵀ of this tile
    if (more) next.store(Ks, Vs);
    __syncthreads();  // the next tile is in
  };
  int t = 0;
  for (; t < n_full; ++t) key_tile(t, std::false_type{});  // stage 1: left of the diagonal, no mask
  for (; t < n_tiles; ++t) key_tile(t, std::true_type{});  // stage 2: the diagonal, the ragged end

  // dQ_i = scale·dS·K, once.
  dq += bh * seq_q * head_dim;
#pragma unroll
  for (int r = 0; r < C::ACC_ROWS; ++r) {
    const int row = m0 + chunk<RG>(rg, r);
    if (row >= seq_q) continue;
#pragma unroll
    for (int c = 0; c < C::ACC_COLS; c += 4) {
      const int col = chunk<CG>(cg, c);
      if (col < head_dim)
        *reinterpret_cast<float4*>(dq + std::size_t(row) * head_dim + col) = make_float4(
            scale * dq_acc[r][c], scale * dq_acc[r][c + 1], scale * dq_acc[r][c + 2], scale * dq_acc[r][c + 3]);
    }
  }
}

// ---- launcher ---------------------------------------------------------------------------------------------
template <int D>
void launch(const fa::AttnBwdArgs& a, cudaStream_t stream) {
  using C = Config<D>;
  static const bool ready = [] {  // once per kernel: more than 48 KB of shared memory, largest carveout
    fa::opt_in_shared_memory(backward_dkdv<D>, C::DKDV_SMEM_BYTES, info().name);
    fa::opt_in_shared_memory(backward_dq<D>, C::DQ_SMEM_BYTES, info().name);
    return true;
  }();
  (void)ready;
  const fa::AttnParams& p = a.p;
  const auto *q = static_cast<const float*>(a.q), *k = static_cast<const float*>(a.k),
             *v = static_cast<const float*>(a.v), *o = static_cast<const float*>(a.o),
             *dout = static_cast<const float*>(a.dout);
  // The two kernels are independent: each reads only the inputs and writes only its outputs. So
  // they may run at the same time: the dK/dV kernel on a side stream, the dQ kernel on the
  // caller's. Back to back on one stream, the last, partly filled wave of the first would leave
  // SMs idle until it ends; side by side, the second kernel's blocks fill them.
  fa::StreamFork fork(stream);
  const dim3 grid_kv((p.seq_k + C::BLOCK_N - 1) / C::BLOCK_N, p.batch * p.heads);
  backward_dkdv<D><<<grid_kv, C::THREADS, C::DKDV_SMEM_BYTES, fork.side()>>>(
      q, k, v, o, dout, a.lse, static_cast<float*>(a.dk), static_cast<float*>(a.dv), p.seq_q, p.seq_k, p.head_dim,
      p.scale, p.causal);
  FA_CHECK_LAUNCH();
  const dim3 grid_q((p.seq_q + C::BLOCK_M - 1) / C::BLOCK_M, p.batch * p.heads);
  backward_dq<D><<<grid_q, C::THREADS, C::DQ_SMEM_BYTES, stream>>>(q, k, v, o, dout, a.lse, static_cast<float*>(a.dq),
                                                                   p.seq_q, p.seq_k, p.head_dim, p.scale, p.causal);
  FA_CHECK_LAUNCH();
  fork.join();
}

void backward(const fa::AttnBwdArgs& a, cudaStream_t stream) {
  fa::check_attention_launch(info(), a.p, {a.q, a.k, a.v, a.o, a.dout, a.dq, a.dk, a.dv},
                             "Q, K, V, O, dO, dQ, dK and dV");
  const fa::AttnParams& p = a.p;
  // head_dim is padded up to an instance with zeros: they add nothing to the products, and the
  // padding columns of dQ, dK, dV are never stored.
  if (p.head_dim <= 64)
    launch<64>(a, stream);
  else
    launch<128>(a, stream);
}

// The FlashAttention-2 benchmark shape at seq 2048, head_dim 64 (batch 8, 32 heads), fwd + bwd.
fa::Problem default_problem() {
  fa::Problem p = fa::fa2_problem(2048, 64, /*causal=*/false, fa::DType::F32);
  p.backward = true;
  return p;
}

const fa::StepInfo& info() {
  static const fa::StepInfo i = [] {
    fa::StepInfo s{
        "07_flash_backward",
        "FA2 backward, no atomics: a dQ kernel over query blocks, a dK/dV kernel over key blocks, P from LSE",
        fa::Family::Attention};
    s.attn_fwd = step06::info().attn_fwd;
    s.attn_bwd = backward;
    s.default_problem = default_problem;
    return s;
  }();
  return i;
}

}  // namespace step07
