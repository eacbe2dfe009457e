// =============================================================================================
// FlashAttention from scratch, step by step, in CUDA C++
// Step 05: the FlashAttention-2 forward (Dao 2023, Algorithm 1), fp32 on the CUDA cores
//
// What changes since step 04: S and P never reach device memory. One thread block owns BLOCK_M
// query rows of one (batch, head). It loads its Q tile once, then walks the keys in tiles of
// BLOCK_N, each K and V tile staged through shared memory, and keeps per row step 02's running
// pair (m, l) with an unnormalised output row o beside it, all in registers:
//
//   S     = scale · Q Kᵀ_t                 [BLOCK_M, BLOCK_N], registers (an 8×KEYS piece per thread)
//   m_new = max(m, rowmax S)               alpha = exp(m - m_new)   (1 unless the max grew)
//   P     = exp(S - m_new)                 l = alpha·l + rowsum P,  o = alpha·o + P V_t
//
// and after the last tile O = o / l and LSE = m + log l, one division per row. Device memory
// sees Q read once, K and V once per query block, O and LSE written once. Causal attention
// masks every tile element by element (key j > query i gets -inf), even tiles that lie wholly
// right of the diagonal: step 06 stops computing those.
//
// The two products are register-blocked like an SGEMM: per step of its inner loop a thread
// loads 8 + KEYS (or 8 + COLS) floats from shared memory as float4 and does 8·KEYS (8·COLS)
// FFMAs, with the next step's loads already in flight. P is produced in one thread layout (by
// key) and consumed in another (by output column), so it makes one round trip through shared
// memory per tile; the tensor-core steps (09+) keep it in registers instead.
//
//   head_dim ≤ 64  (instance 64):  BLOCK_M 128, BLOCK_N 64, 128 threads = 16 row groups × 8
//                                  column groups; S 8×8 and O 8×8 per thread; 99,072 B of
//                                  shared memory
//   head_dim ≤ 128 (instance 128): BLOCK_M 64, BLOCK_N 64, 128 threads = 8 × 16; S 8×4 and O 8×8
//                                  per thread; 115,712 B (all that two blocks per SM allow)
// Per step of the inner loops: 8×8 FFMAs per 16 floats loaded (8×4 per 12 for S at d = 128).
// Registers per thread: profiles/h100/ptxas.csv (generated from the build; no spills); 2 blocks
// of 4 warps per SM (registers and shared memory both allow exactly 2): 8 of 64 warp slots.
// With so few warps, nothing may wait for memory: V_t is fetched into registers before Q·Kᵀ_t
// and K_{t+1} before P·V_t, each stored to shared memory after that product; every global load
// of a warp reads whole 128-byte lines; the transposed Q and K tiles are padded so that their
// stores have no bank conflicts.
// exp: expf, full precision (about eight instructions per score; doc 05 counts them against the
// FFMAs); step 10 switches to exp2 with log2(e) folded into the scale.
//
// Build + run:  cmake --build build --target 05_flash_forward && build/bin/05_flash_forward
// Read with:    docs/05_flash_forward.md
// =============================================================================================
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "check.h"
#include "launch.h"
#include "ops.h"

namespace step05 {

const fa::StepInfo& info();  // bottom of the file: the step's name for messages

constexpr int THREADS = 128;   // 4 warps per block, 2 blocks per SM (shared memory and registers)
constexpr int kRows = 8;       // query rows per thread, in S and in O
constexpr int kWarp = 32;
constexpr int WARPS = THREADS / kWarp;

// ---- tile configuration, per head-dim instance -------------------------------------------------
template <int D>
struct Config {
  // d = 64: a 128-row Q tile halves the K/V traffic per FLOP and gives each thread an 8×8 piece
  // of S; d = 128 has no room for that (O alone would need 128 registers), so 64 rows.
  static constexpr int BLOCK_M = D == 64 ? 128 : 64;
  static constexpr int BLOCK_N = 64;
  static constexpr int ROW_GROUPS = BLOCK_M / kRows;        // 16 | 8
  static constexpr int COL_GROUPS = THREADS / ROW_GROUPS;   // 8 | 16 threads share a row
  static constexpr int KEYS = BLOCK_N / COL_GROUPS;         // 8 | 4 columns of S per thread
  static constexpr int COLS = D / COL_GROUPS;               // 8 | 8 columns of O per thread
  // The transposed tiles carry 4 floats of padding after every 4 rows (trow): their stores are
  // then conflict-free (Qt, Kt), or 2-way instead of 4-way (Pt). At d = 128 two blocks per SM
  // leave room for only two of the three paddings; this layout fills the budget to the byte
  // (115,712 B). Padding Pt instead of Qt (whose stores then conflict 8-way, once per block)
  // measured 1% slower.
  static constexpr bool P_PAD = D == 64;
  static constexpr int Q_FLOATS = D * BLOCK_M + D;                             // Qt [D, BLOCK_M] padded
  static constexpr int K_FLOATS = D * BLOCK_N + D;                             // Kt [D, BLOCK_N] padded
  static constexpr int V_FLOATS = BLOCK_N * D;                                 // V  [BLOCK_N, D]
  static constexpr int P_FLOATS = BLOCK_N * BLOCK_M + (P_PAD ? BLOCK_N : 0);  // Pt [BLOCK_N, BLOCK_M]
  static constexpr std::size_t SMEM_BYTES = sizeof(float) * (Q_FLOATS + K_FLOATS + V_FLOATS + P_FLOATS);

  static_assert(D == 64 || D == 128, "instances: head_dim padded to 64 or 128");
  static_assert(BLOCK_M % kRows == 0 && THREADS % ROW_GROUPS == 0, "whole row groups, whole threads");
  static_assert(COL_GROUPS >= 2 && COL_GROUPS <= 16 && (COL_GROUPS & (COL_GROUPS - 1)) == 0,
                "a row's threads sit in one warp at lane bits 0, 2, 3, ... (see lane_layout)");
  static_assert(KEYS % 4 == 0 && COLS % 4 == 0, "each thread owns whole float4 chunks of S and O columns");
  static_assert(BLOCK_N * D % (4 * THREADS) == 0 && BLOCK_M * D % (4 * THREADS) == 0,
                "every thread moves the same number of float4 per tile");
  static_assert(BLOCK_M % kWarp == 0 && BLOCK_N % kWarp == 0 && D % 4 == 0, "whole groups of 4 rows (trow)");
  static_assert(2 * (SMEM_BYTES + 1024) <= 228 * 1024, "two blocks per SM on sm_90 (1 KB reserved per block)");
};

// ---- who owns what -------------------------------------------------------------------------------
// Thread (row group rg, column group cg) owns query rows 8·rg .. 8·rg+7 of the block, the S
// columns (keys) and the O columns (head dims) given by chunk(): float4 chunks 4·COL_GROUPS
// apart, so that the COL_GROUPS threads of a row read one contiguous run of shared memory.
template <int COL_GROUPS>
__device__ __forceinline__ int chunk(int cg, int e) {
  return (e / 4) * 4 * COL_GROUPS + 4 * cg + e % 4;
}

// Lanes n and n^1 share a row group and lanes n and n^2 share a column group. Every float4 load
// of the inner loops then reads one address per pair of lanes, which shared memory serves at
// twice the rate of 32 distinct addresses (a warp's LDS.128 takes 2 cycles instead of 4).
template <int COL_GROUPS>
__device__ __forceinline__ void lane_layout(int& rg, int& cg) {
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  constexpr int HALF = COL_GROUPS / 2;
  cg = (lane & 1) | ((lane >> 2) % HALF) << 1;
  rg = warp * (kWarp / COL_GROUPS) + (((lane >> 1) & 1) | ((lane >> 2) / HALF) << 1);
}

// Max / sum over the COL_GROUPS threads of a row (lane bits 0 and 2, 3, ...): every lane gets it.
template <int COL_GROUPS>
__device__ __forceinline__ float row_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
#pragma unroll
  for (int o = 4; o < 2 * COL_GROUPS; o *= 2) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
  return x;
}
template <int COL_GROUPS>
__device__ __forceinline__ float row_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
#pragma unroll
  for (int o = 4; o < 2 * COL_GROUPS; o *= 2) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

__device__ __forceinline__ float4 lds4(const float* p) { return *reinterpret_cast<const float4*>(p); }
__device__ __forceinline__ void put4(float* a, float4 v) { a[0] = v.x, a[1] = v.y, a[2] = v.z, a[3] = v.w; }

// As in step 02: a row that has seen only -inf shifts by 0, so its exponentials are 0, not NaN.
__device__ __forceinline__ float safe_shift(float m) { return m == -INFINITY ? 0.f : m; }

// Offset of row r of a transposed tile whose rows are COLS floats (Qt, Kt, Pt): 4 floats of
// padding after every 4 rows. A warp's transposed stores of a 4-row × 128-byte block (TileLoad)
// then land on 32 different banks, and every row still starts on a 16-byte boundary (float4).
template <int COLS, bool PAD = true>
__device__ __forceinline__ int trow(int r) {
  return r * COLS + (PAD ? r / 4 * 4 : 0);
}

// ---- device memory -> shared memory, through registers ----------------------------------------------
// A [ROWS, D] tile of one head's [seq, head_dim] matrix: fetch() issues all of a thread's loads
// into registers, store() writes them to shared memory. The kernel calls fetch() a whole product
// before store(), so the wait for L2 hides behind FFMAs (register prefetch, as step 03 does).
// Rows >= seq and columns >= head_dim read as 0 (finite: a masked key's P = 0 times its V must
// stay 0).
// Each warp instruction loads a block of 4 rows × 128 bytes (lane = 8·row + float4 chunk): four
// whole 128-byte lines, four L1 tag lookups. The warps take the D/32 blocks of a row side by side.
//   TRANSPOSE: dst [D, ROWS] (trow): the four scalar stores of a warp hit 32 different banks.
//   else:      dst [ROWS, D]: each 8-lane phase of a float4 store writes 128 contiguous bytes.
template <int ROWS, int D, bool TRANSPOSE>
struct TileLoad {
  static constexpr int VECS = ROWS * D / 4 / THREADS;   // float4 per thread
  static constexpr int LINES = D / 32;                  // 128-byte blocks per row: 2 | 4
  static constexpr int ROW_STEP = 4 * WARPS / LINES;    // rows between a thread's loads: 8 | 4
  static_assert(WARPS % LINES == 0 && VECS * ROW_STEP == ROWS, "the warps tile the rows exactly");
  float4 v[VECS];

  // This thread's load i: row row0() + i·ROW_STEP, columns col0() .. col0() + 3.
  __device__ static int row0() { return 4 * (threadIdx.x / kWarp / LINES) + threadIdx.x % kWarp / 8; }
  __device__ static int col0() { return 32 * (threadIdx.x / kWarp % LINES) + 4 * (threadIdx.x % 8); }

  __device__ void fetch(const float* __restrict__ src, int row0_tile, int seq, int head_dim) {
    const int r = row0_tile + row0(), c = col0();
    if (row0_tile + ROWS <= seq && head_dim == D) {
      // A whole tile (all but the last): no bounds checks, and with the row pitch known at compile
      // time every load is one base pointer plus a constant offset (LDG [R+imm]).
      const float* p = src + std::size_t(r) * D + c;
#pragma unroll
      for (int i = 0; i < VECS; ++i) v[i] = *reinterpret_cast<const float4*>(p + i * ROW_STEP * D);
    } else {
#pragma unroll
      for (int i = 0; i < VECS; ++i) {
        const int ri = r + i * ROW_STEP;
        v[i] = ri < seq && c < head_dim ? *reinterpret_cast<const float4*>(src + std::size_t(ri) * head_dim + c)
                                        : make_float4(0.f, 0.f, 0.f, 0.f);
      }
    }
  }
  __device__ void scale(float s) {
#pragma unroll
    for (int i = 0; i < VECS; ++i) v[i].x *= s, v[i].y *= s, v[i].z *= s, v[i].w *= s;
  }
  __device__ void store(float* dst) const {
    const int r = row0(), c = col0();
#pragma unroll
    for (int i = 0; i < VECS; ++i) {
      if constexpr (TRANSPOSE) {  // column c + k is row trow(c + k) = trow(c) + k·ROWS of dst (4 | c)
        float* d = dst + trow<ROWS>(c) + r + i * ROW_STEP;
        d[0] = v[i].x, d[ROWS] = v[i].y, d[2 * ROWS] = v[i].z, d[3 * ROWS] = v[i].w;
      } else {
        *reinterpret_cast<float4*>(dst + (r + i * ROW_STEP) * D + c) = v[i];
      }
    }
  }
};

// ---- the two products ---------------------------------------------------------------------------------
// Both loops are software-pipelined by hand: the operands of step d+1 are loaded into a second set
// of registers (b) while the FFMAs of step d run on the first (a), so no step waits for shared
// memory. They walk a group of 4 rows at a time (trow's padding sits between groups). The last
// step loads group 0 again: a harmless read that keeps the loop free of branches.

// s [8, KEYS] = this thread's piece of (scale·Q) Kᵀ: per d, 8 floats of Qt and KEYS of Kt (float4
// loads), 8·KEYS FFMAs.
template <int D>
__device__ __forceinline__ void tile_scores(const float* Qt, const float* Kt, int rg, int cg,
                                            float (&s)[kRows][Config<D>::KEYS]) {
  using C = Config<D>;
  constexpr int M = C::BLOCK_M, N = C::BLOCK_N, KEYS = C::KEYS;
  const float* qt = Qt + kRows * rg;                   // this thread's 8 query rows, at d = 0
  const float* kt = Kt + chunk<C::COL_GROUPS>(cg, 0);  // this thread's keys, at d = 0
  float qa[kRows], ka[KEYS], qb[kRows], kb[KEYS];      // registers: a column of Q rows, a row of keys
  auto load = [&](const float* q_d, const float* k_d, float(&q)[kRows], float(&k)[KEYS]) {
    put4(q, lds4(q_d)), put4(q + 4, lds4(q_d + 4));
#pragma unroll
    for (int e = 0; e < KEYS; e += 4) put4(k + e, lds4(k_d + chunk<C::COL_GROUPS>(0, e)));
  };
  auto step = [&](const float(&q)[kRows], const float(&k)[KEYS]) {
#pragma unroll
    for (int i = 0; i < kRows; ++i)
#pragma unroll
      for (int e = 0; e < KEYS; ++e) s[i][e] = fmaf(q[i], k[e], s[i][e]);
  };
#pragma unroll
  for (int i = 0; i < kRows; ++i)
#pragma unroll
    for (int e = 0; e < KEYS; ++e) s[i][e] = 0.f;
  load(qt, kt, qa, ka);
#pragma unroll 2
  for (int d = 0; d < D; d += 4) {
    const float *qg = qt + trow<M>(d), *kg = kt + trow<N>(d);  // rows d .. d+3 of Qt and Kt
    const int next = (d + 4) % D;
    load(qg + M, kg + N, qb, kb), step(qa, ka);
    load(qg + 2 * M, kg + 2 * N, qa, ka), step(qb, kb);
    load(qg + 3 * M, kg + 3 * N, qb, kb), step(qa, ka);
    load(qt + trow<M>(next), kt + trow<N>(next), qa, ka), step(qb, kb);
  }
}

// o [8, COLS] += this thread's rows of P times its columns of V: per key j, 8 floats of Pt and
// COLS of V (float4 loads), 8·COLS FFMAs.
template <int D>
__device__ __forceinline__ void tile_pv(const float* Pt, const float* Vs, int rg, int cg,
                                        float (&o)[kRows][Config<D>::COLS]) {
  using C = Config<D>;
  constexpr int M = C::BLOCK_M, COLS = C::COLS;
  const float* pt = Pt + kRows * rg;                   // this thread's 8 query rows, at key 0
  const float* vs = Vs + chunk<C::COL_GROUPS>(cg, 0);  // this thread's columns, at key 0
  float pa[kRows], va[COLS], pb[kRows], vb[COLS];      // registers: P[rows, j], V[j, columns]
  auto load = [&](const float* p_j, const float* v_j, float(&p)[kRows], float(&v)[COLS]) {
    put4(p, lds4(p_j)), put4(p + 4, lds4(p_j + 4));
#pragma unroll
    for (int c = 0; c < COLS; c += 4) put4(v + c, lds4(v_j + chunk<C::COL_GROUPS>(0, c)));
  };
  auto step = [&](const float(&p)[kRows], const float(&v)[COLS]) {
#pragma unroll
    for (int i = 0; i < kRows; ++i)
#pragma unroll
      for (int c = 0; c < COLS; ++c) o[i][c] = fmaf(p[i], v[c], o[i][c]);
  };
  load(pt, vs, pa, va);
#pragma unroll 2
  for (int j = 0; j < C::BLOCK_N; j += 4) {
    const float *pg = pt + trow<M, C::P_PAD>(j), *vg = vs + j * D;  // keys j .. j+3 of Pt and V
    const int next = (j + 4) % C::BLOCK_N;
    load(pg + M, vg + D, pb, vb), step(pa, va);
    load(pg + 2 * M, vg + 2 * D, pa, va), step(pb, vb);
    load(pg + 3 * M, vg + 3 * D, pb, vb), step(pa, va);
    load(pt + trow<M, C::P_PAD>(next), vs + next * D, pa, va), step(pb, vb);
  }
}

// ---- the kernel ----------------------------------------------------------------------------------------
// grid (query blocks, batch·heads); block THREADS. D: head_dim padded up to the instance.
template <int D>
__global__ void __launch_bounds__(THREADS, 2)
    flash_forward(const float* __restrict__ q, const float* __restrict__ k, const float* __restrict__ v,
                  float* __restrict__ o, float* __restrict__ lse, int seq_q, int seq_k, int head_dim, float scale,
                  bool causal) {
  using C = Config<D>;
  extern __shared__ float4 smem4[];             // float4: 16-byte alignment for the vector accesses
  float* Qt = reinterpret_cast<float*>(smem4);  // [D, BLOCK_M]        scale·Q, transposed (whole block)
  float* Kt = Qt + C::Q_FLOATS;                 // [D, BLOCK_N]        K tile, transposed
  float* Vs = Kt + C::K_FLOATS;                 // [BLOCK_N, D]        V tile
  float* Pt = Vs + C::V_FLOATS;                 // [BLOCK_N, BLOCK_M]  P tile, transposed

  const int qb = blockIdx.x;
  const int m0 = qb * C::BLOCK_M;     // first query row of this block
  const std::size_t bh = blockIdx.y;  // flattened (batch, head)
  q += bh * seq_q * head_dim, k += bh * seq_k * head_dim, v += bh * seq_k * head_dim;
  int rg, cg;
  lane_layout<C::COL_GROUPS>(rg, cg);

  // Q once, pre-multiplied by the scale (saves a multiply per score), and the first K tile: both
  // fetches in flight together.
  TileLoad<C::BLOCK_N, D, true> kload;   // K tiles -> Kt
  TileLoad<C::BLOCK_N, D, false> vload;  // V tiles -> Vs
  {
    TileLoad<C::BLOCK_M, D, true> qload;
    qload.fetch(q, m0, seq_q, head_dim);
    kload.fetch(k, 0, seq_k, head_dim);
    qload.scale(scale);
    qload.store(Qt);
    kload.store(Kt);
  }
  __syncthreads();

  float acc[kRows][C::COLS];  // [8, COLS] unnormalised O rows, registers
  float m[kRows], l[kRows];   // running max (whole row) and sum (this thread's keys only)
#pragma unroll
  for (int i = 0; i < kRows; ++i) {
    m[i] = -INFINITY, l[i] = 0.f;
#pragma unroll
    for (int c = 0; c < C::COLS; ++c) acc[i][c] = 0.f;
  }

  const int n_tiles = (seq_k + C::BLOCK_N - 1) / C::BLOCK_N;  // every key tile, causal or not

  // One key tile: S = Q·Kᵀ, mask, online softmax, P to shared memory, O += P·V. The global loads
  // of V_t and K_{t+1} are issued one product ahead of their stores (register prefetch).
  auto attend = [&](int t) {
    const int n0 = t * C::BLOCK_N;        // first key of this tile
    vload.fetch(v, n0, seq_k, head_dim);  // V_t -> registers, in flight during Q·Kᵀ (K_t is in Kt)

    float s[kRows][C::KEYS];  // [8, KEYS] scores, registers
    tile_scores<D>(Qt, Kt, rg, cg, s);

    // Mask every element of every tile: keys past seq_k, and (causal) keys after the query.
#pragma unroll
    for (int i = 0; i < kRows; ++i) {
      const int row = m0 + kRows * rg + i;
      const int visible = causal ? min(row + 1, seq_k) : seq_k;  // this row sees keys [0, visible)
      const int lim = visible - n0 - 4 * cg;  // key n0 + chunk(cg, e) is visible iff chunk(0, e) < lim
#pragma unroll
      for (int e = 0; e < C::KEYS; ++e)
        if (chunk<C::COL_GROUPS>(0, e) >= lim) s[i][e] = -INFINITY;
    }

    // The online-softmax step of each row (step 02's recurrence with the output row attached).
#pragma unroll
    for (int i = 0; i < kRows; ++i) {
      float tile_max = s[i][0];
#pragma unroll
      for (int e = 1; e < C::KEYS; ++e) tile_max = fmaxf(tile_max, s[i][e]);
      const float m_new = fmaxf(m[i], row_max<C::COL_GROUPS>(tile_max));
      const float shift = safe_shift(m_new);
      const float alpha = expf(m[i] - shift);  // e^(m_old - m_new): 0 on the first tile, 1 if the max held
      m[i] = m_new;
      float sum = 0.f;
#pragma unroll
      for (int e = 0; e < C::KEYS; ++e) s[i][e] = expf(s[i][e] - shift), sum += s[i][e];
      l[i] = l[i] * alpha + sum;  // partial: the row's other threads hold the rest (same m, same alpha)
#pragma unroll
      for (int c = 0; c < C::COLS; ++c) acc[i][c] *= alpha;
    }

    // V_t and P to shared memory (Vs and Pt were last read before the previous barrier). P goes
    // transposed: the P·V product needs whole rows of P in every thread of the row, and this
    // thread holds only its keys.
    vload.store(Vs);
#pragma unroll
    for (int e = 0; e < C::KEYS; ++e) {
      float* dst = Pt + trow<C::BLOCK_M, C::P_PAD>(chunk<C::COL_GROUPS>(cg, e)) + kRows * rg;
      *reinterpret_cast<float4*>(dst) = make_float4(s[0][e], s[1][e], s[2][e], s[3][e]);
      *reinterpret_cast<float4*>(dst + 4) = make_float4(s[4][e], s[5][e], s[6][e], s[7][e]);
    }
    __syncthreads();  // P and V are in shared memory; everyone is done reading Kt

    // K_{t+1} -> registers, in flight during P·V. After the last tile it reads an empty range
    // (seq 0: zeros, no loads); a select, not a branch around the fetch, which made ptxas spill.
    const bool more = t + 1 < n_tiles;
    kload.fetch(k, n0 + C::BLOCK_N, more ? seq_k : 0, head_dim);
    tile_pv<D>(Pt, Vs, rg, cg, acc);
    if (more) kload.store(Kt);  // Kt was last read before the barrier above
    __syncthreads();            // K_{t+1} is in; everyone is done reading Pt and Vs
  };
  for (int t = 0; t < n_tiles; ++t) attend(t);

  // O = acc / l, one division per row; LSE = m + log l. A row with l = 0 (no visible key: not
  // possible with top-left causal and seq_k >= 1, kept safe anyway) gets O = 0 and LSE = -inf.
  o += bh * seq_q * head_dim, lse += bh * seq_q;
#pragma unroll
  for (int i = 0; i < kRows; ++i) {
    const float row_l = row_sum<C::COL_GROUPS>(l[i]);
    const int row = m0 + kRows * rg + i;
    if (row >= seq_q) continue;
    const float inv_l = row_l > 0.f ? 1.f / row_l : 0.f;
#pragma unroll
    for (int c = 0; c < C::COLS; c += 4) {
      const int col = chunk<C::COL_GROUPS>(cg, c);
      if (col < head_dim)
        *reinterpret_cast<float4*>(o + std::size_t(row) * head_dim + col) =
            make_float4(acc[i][c] * inv_l, acc[i][c + 1] * inv_l, acc[i][c + 2] * inv_l, acc[i][c + 3] * inv_l);
    }
    if (cg == 0) lse[row] = row_l > 0.f ? m[i] + logf(row_l) : -INFINITY;
  }
}

// ---- launcher ---------------------------------------------------------------------------------------------
template <int D>
void launch(const fa::AttnFwdArgs& a, cudaStream_t stream) {
  using C = Config<D>;
  // Once per instance: opt in to more than 48 KB of dynamic shared memory, and ask for the
  // largest shared-memory carveout so that two blocks fit per SM.
  static const bool ready = [] {
    fa::opt_in_shared_memory(flash_forward<D>, C::SMEM_BYTES, info().name);
    return true;
  }();
  (void)ready;
  const fa::AttnParams& p = a.p;
  const dim3 grid((p.seq_q + C::BLOCK_M - 1) / C::BLOCK_M, p.batch * p.heads);
  flash_forward<D><<<grid, THREADS, C::SMEM_BYTES, stream>>>(
      static_cast<const float*>(a.q), static_cast<const float*>(a.k), static_cast<const float*>(a.v),
      static_cast<float*>(a.o), a.lse, p.seq_q, p.seq_k, p.head_dim, p.scale, p.causal);
  FA_CHECK_LAUNCH();
}

void forward(const fa::AttnFwdArgs& a, cudaStream_t stream) {
  fa::check_attention_launch(info(), a.p, {a.q, a.k, a.v, a.o}, "Q, K, V and O");
  const fa::AttnParams& p = a.p;
  // head_dim is padded up to an instance with zeros: they add nothing to Q·Kᵀ, and O's padding
  // columns are never stored.
  if (p.head_dim <= 64)
    launch<64>(a, stream);
  else
    launch<128>(a, stream);
}

const fa::StepInfo& info() {
  static const fa::StepInfo i = [] {
    fa::StepInfo s{"05_flash_forward",
                   "FlashAttention-2 forward: K/V tiles through shared memory, online softmax, O in registers",
                   fa::Family::Attention};
    s.attn_fwd = forward;
    return s;
  }();
  return i;
}

}  // namespace step05
