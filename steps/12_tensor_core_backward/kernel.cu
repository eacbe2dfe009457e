// =============================================================================================
// FlashAttention from scratch, step by step, in CUDA C++
// Step 12: the backward on tensor cores: fp16/bf16 in and out, fp32 accumulation, mma.sync for
//          the five products, dQ by fp32 atomics or by a deterministic pass
//
// What changes since step 08: the algorithm is step 08's (delta once, then a kernel over key
// blocks that keeps K_j, V_j, dK_j and dV_j on chip and walks the query tiles, P recomputed from
// the forward's LSE), but every product runs on the tensor cores with the instructions of steps
// 09-10 (mma.sync, ldmatrix, the XOR swizzle, cp.async). The new idea is how the five products
// map onto fragments: the dK/dV kernel computes them transposed, keys as the mma's M (Sᵀ = K·Qᵀ,
// dPᵀ = V·dOᵀ), so that a warp's accumulators are rows of dK and dV and Pᵀ and dSᵀ feed
// dV += Pᵀ·dO and dK += dSᵀ·Q from registers.
// dQ two ways (AttnParams::variant, `--variant NAME`): deterministic (the default), a dQ kernel
// that recomputes S and dP the forward's way round and owns its rows of dQ; atomic, the dK/dV
// kernel adds each key block's share into an fp32 workspace with 16-byte atomics.
//
// Kernels, in launch order: delta (one warp per row), dK/dV (a block per 64 keys, 4 warps of 16
// keys), then convert (atomic) or dQ (deterministic: a block per 64 queries, beside dK/dV on a
// second stream). Tiles 64 × 64; head_dim instances 64 and 128 (any multiple of 8 up to 128, padded).
//
// Build + run:  cmake --build build --target 12_tensor_core_backward && build/bin/12_tensor_core_backward
// Read with:    docs/12_tensor_core_backward.md
// =============================================================================================
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>

#include "check.h"
#include "cp_async.cuh"
#include "launch.h"
#include "mma_sync.cuh"
#include "ops.h"
#include "streams.h"

namespace step11 {
const fa::StepInfo& info();  // the forward of this step
}  // namespace step11

namespace step12 {
using namespace fa::ptx;  // step 09's ldmatrix_x4(_trans), mma_16816, pack; step 10's cp_async_*, exp2_approx, swz

const fa::StepInfo& info();  // bottom of the file: the step's name for messages

constexpr int kWarp = 32;
constexpr int WARPS = 4;
constexpr int THREADS = WARPS * kWarp;
constexpr int BLOCK_M = 64;          // queries per tile (dK/dV kernel) or per block (dQ kernel)
constexpr int BLOCK_N = WARPS * 16;  // keys per block (dK/dV kernel: 16 per warp) or per tile (dQ kernel)
constexpr float kLog2e = 1.4426950408889634f;
static_assert(BLOCK_M == WARPS * 16, "the dQ kernel: 16 query rows per warp");

// The two ways to produce dQ: AttnParams::variant indexes StepInfo::variants.
enum Variant { kDeterministic = 0, kAtomic = 1 };

// Shared memory of the two main kernels (16-bit elements, then fp32 rows).
template <int D>
struct Smem {
  static constexpr int TILE = 64 * D;  // a [64, D] tile of Q, dO, K or V
  // dK/dV: K, V, Q[2], dO[2], dSᵀ [BLOCK_N, BLOCK_M], then LSE[2] and delta[2] [BLOCK_M] fp32.
  static constexpr std::size_t DKDV_BYTES = 2 * (6 * TILE + BLOCK_N * BLOCK_M) + 4 * 4 * BLOCK_M;
  // dQ: Q, dO, K[2], V[2].
  static constexpr std::size_t DQ_BYTES = 2 * 6 * TILE;
  static_assert(D == 64 || D == 128, "head_dim instances 64 and 128");
  static_assert(2 * (DKDV_BYTES + 1024) <= 228 * 1024, "two dK/dV blocks per SM on sm_90");
};

__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
// One register of two fp16/bf16 -> two fp32 (low half: x), the inverse of pack.
template <class T>
__device__ __forceinline__ float2 unpack(std::uint32_t r) {
  if constexpr (std::is_same_v<T, __half>)
    return __half22float2(*reinterpret_cast<const __half2*>(&r));
  else
    return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&r));
}

// ---- device memory -> shared memory ----------------------------------------------------------------
// A [ROWS, D] tile of one head's [seq, head_dim] matrix into smem (swizzled), one 16-byte cp.async per
// chunk, as in step 10. A thread owns one chunk column c and the rows r0, r0 + ROW_STEP, ... (ROW_STEP a
// multiple of 8: one swizzled position for all). Rows >= seq, columns >= head_dim: zero-filled. Issue only.
template <int ROWS, int D, class T>
__device__ __forceinline__ void copy_tile(T* dst, const T* __restrict__ src, int row0, int seq, int head_dim) {
  constexpr int CHUNKS = D / 8;               // 16-byte chunks per row
  constexpr int ROW_STEP = THREADS / CHUNKS;  // 16 | 8
  static_assert(ROWS % ROW_STEP == 0 && ROW_STEP % 8 == 0, "whole passes, one swizzled column per thread");
  const int r0 = threadIdx.x / CHUNKS, c = threadIdx.x % CHUNKS;
#pragma unroll
  for (int i = 0; i < ROWS / ROW_STEP; ++i) {
    const int r = r0 + i * ROW_STEP;
    const bool in = row0 + r < seq && 8 * c < head_dim;  // head_dim % 8 == 0: a chunk is wholly in or out
    const T* from = in ? src + std::size_t(row0 + r) * head_dim + 8 * c : src;  // a valid address either way
    cp_async_16(dst + swz<D>(r, c), from, in ? 16 : 0);
  }
}

// The LSE a row's P uses, times log2(e): +inf for rows past seq_q and for a row whose LSE is −inf
// (no visible key), so that P = 2^(s·sl2 − inf) = 0, never NaN (step 08's lse_for_p).
__device__ __forceinline__ float lse_log2(const float* __restrict__ lse, int row, int seq_q) {
  const float l = row < seq_q ? lse[row] : INFINITY;
  return l == -INFINITY ? INFINITY : l * kLog2e;
}

// ---- delta = rowsum(dO ∘ O), once --------------------------------------------------------------------
// One warp per row: each lane reads 16-byte chunks (8 elements) of dO and O, fp32 products and sums.
constexpr int kDeltaThreads = 256;
template <class T>
__global__ void __launch_bounds__(kDeltaThreads)
    backward_delta(const T* __restrict__ o, const T* __restrict__ dout, float* __restrict__ delta, long long rows,
                   int head_dim) {
  const long long row = (long long)blockIdx.x * (kDeltaThreads / kWarp) + threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (row >= rows) return;  // the whole warp: one row per warp
  o += row * head_dim, dout += row * head_dim;
  float sum = 0.f;
  for (int c = 8 * lane; c < head_dim; c += 8 * kWarp) {
    const uint4 a = *reinterpret_cast<const uint4*>(o + c), b = *reinterpret_cast<const uint4*>(dout + c);
    const T* x = reinterpret_cast<const T*>(&a);
    const T* y = reinterpret_cast<const T*>(&b);
#pragma unroll
    for (int e = 0; e < 8; ++e) sum = fmaf(to_float(x[e]), to_float(y[e]), sum);
  }
#pragma unroll
  for (int off = kWarp / 2; off > 0; off /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, off);
  if (lane == 0) delta[row] = sum;
}

// ---- the products, per warp --------------------------------------------------------------------------
// C += A·Bᵀ over D: C [16 rows of A from a0, BLOCK_M rows of Bt] C fragments, n-tile j = rows 8j.. of Bt.
// A, Bt: swizzled [.., D] tiles, both by plain ldmatrix, as the forward reads Q and K (B[d][n] = Bt[n][d]).
template <int D, class T>
__device__ __forceinline__ void mma_abt(float (&c)[BLOCK_M / 8][4], const T* A, int a0, const T* Bt, int lane) {
#pragma unroll 1  // kk indexes only addresses: unrolled, its D/16 swizzled offsets would all stay live
  for (int kk = 0; kk < D / 16; ++kk) {
    std::uint32_t a[4];
    ldmatrix_x4(a, A + swz<D>(a0 + lane % 16, 2 * kk + lane / 16));
#pragma unroll
    for (int jj = 0; jj < BLOCK_M / 16; ++jj) {
      std::uint32_t b[4];
      ldmatrix_x4(b, Bt + swz<D>(jj * 16 + lane % 8 + lane / 16 * 8, 2 * kk + lane / 8 % 2));
      mma_16816<T>(c[2 * jj], a, b[0], b[1]);
      mma_16816<T>(c[2 * jj + 1], a, b[2], b[3]);
    }
  }
}

// C += A·B for k-step kk: C [16, D] C fragments, n-tile j = dims 8j..; a: an A fragment [16, 16 k] from
// registers (the forward's P trick); B's rows 16kk.. hold dims side by side: ldmatrix.trans, as for V.
template <int D, class T>
__device__ __forceinline__ void mma_ab(float (&c)[D / 8][4], const std::uint32_t (&a)[4], const T* B, int kk,
                                       int lane) {
#pragma unroll
  for (int dd = 0; dd < D / 16; ++dd) {
    std::uint32_t b[4];  // matrices: k +0..7 × dims +0..7, +8..15 × +0..7, +0..7 × +8..15, +8..15 × +8..15
    ldmatrix_x4_trans(b, B + swz<D>(kk * 16 + lane % 8 + lane / 8 % 2 * 8, 2 * dd + lane / 16));
    mma_16816<T>(c[2 * dd], a, b[0], b[1]);
    mma_16816<T>(c[2 * dd + 1], a, b[2], b[3]);
  }
}

// ---- atomic variant: a query tile's dQ from this key block, added into dQ_accum --------------------------
// dQ[query][d] += Σ_key dS[query][key]·K[key][d]; ds: this warp's dSᵀ [16 keys, BLOCK_M] fragments,
// dq_accum: this head's, fp32 [seq_q, head_dim]. A warp holds dSᵀ for 16 keys and every query; the
// product wants 16 queries and every key. So dSᵀ goes to shared memory (rows = keys, 4-byte stores:
// element pairs of one row), and each warp reads back the 16 queries it computes.
template <class T, int D>
__device__ __forceinline__ void atomic_dq(float* dq_accum, const float (&ds)[BLOCK_M / 8][4], T* dSt, const T* Ks,
                                          int m0, int seq_q, int head_dim, int warp, int lane) {
  const int g = lane / 4, t4 = lane % 4, w0 = warp * 16;
#pragma unroll
  for (int j = 0; j < BLOCK_M / 8; ++j)
#pragma unroll
    for (int h = 0; h < 2; ++h)  // row w0 + g + 8h, queries 8j + 2·t4, +1: chunk j, 4 bytes at 4·t4
      *reinterpret_cast<std::uint32_t*>(dSt + swz<BLOCK_M>(w0 + g + 8 * h, j) + 2 * t4) =
          pack<T>(ds[j][2 * h], ds[j][2 * h + 1]);
  __syncthreads();  // every warp's dSᵀ rows are in

  // A[query][key] = dSᵀ[key][query]: two keys per register from rows that hold queries side by side:
  // ldmatrix.trans. k-step kk, this warp's queries: queries +0..7 × keys +0..7, +8..15 × +0..7, +0..7 ×
  // +8..15, +8..15 × +8..15 (a[0..3]): dSᵀ rows 16kk + (lane/16)·8 + lane%8, query chunk 2·warp + lane/8%2.
  std::uint32_t a[BLOCK_N / 16][4];
#pragma unroll
  for (int kk = 0; kk < BLOCK_N / 16; ++kk)
    ldmatrix_x4_trans(a[kk], dSt + swz<BLOCK_M>(kk * 16 + lane % 8 + lane / 16 * 8, 2 * warp + lane / 8 % 2));
  // B[key][d] = K[key][d]: ldmatrix.trans of K rows, as the forward reads V. One 16-dim slice at a
  // time, added straight into dQ_accum: 8 fp32 registers instead of D/2. Not unrolled: dd indexes only
  // addresses, and unrolled, its swizzled offsets would all stay live (at d = 128 ptxas then spills).
  const int q0 = m0 + 16 * warp;  // this warp's first query
#pragma unroll 1
  for (int dd = 0; dd < D / 16; ++dd) {
    float c[2][4] = {};  // [16 queries, 16 dims]: n-tiles dims 16dd..+7, 16dd+8..+15
#pragma unroll
    for (int kk = 0; kk < BLOCK_N / 16; ++kk) {
      std::uint32_t b[4];
      ldmatrix_x4_trans(b, Ks + swz<D>(kk * 16 + lane % 8 + lane / 8 % 2 * 8, 2 * dd + lane / 16));
      mma_16816<T>(c[0], a[kk], b[0], b[1]);
      mma_16816<T>(c[1], a[kk], b[2], b[3]);
    }
#pragma unroll
    for (int n = 0; n < 2; ++n) {
      // One 16-byte atomic per lane (sm_90: REDG.E.ADD.F32x4, the result is not read) instead
      // of four scalar ones. A lane holds two columns of rows g and g+8; lanes t4 and t4^1
      // trade pairs so that the even one holds 4 columns of row g, the odd one of row g+8.
      const bool odd = t4 & 1;
      const float x0 = __shfl_xor_sync(0xffffffffu, odd ? c[n][0] : c[n][2], 1);
      const float x1 = __shfl_xor_sync(0xffffffffu, odd ? c[n][1] : c[n][3], 1);
      const float4 four = odd ? make_float4(x0, x1, c[n][2], c[n][3]) : make_float4(c[n][0], c[n][1], x0, x1);
      const int row = q0 + g + (odd ? 8 : 0), col = 16 * dd + 8 * n + 4 * (t4 / 2);
      if (row < seq_q && col < head_dim) {  // head_dim % 8 == 0: four columns wholly in or out
        float* to = dq_accum + std::size_t(row) * head_dim + col;
#if __CUDA_ARCH__ >= 900
        atomicAdd(reinterpret_cast<float4*>(to), four);
#else
        atomicAdd(to, four.x), atomicAdd(to + 1, four.y), atomicAdd(to + 2, four.z), atomicAdd(to + 3, four.w);
#endif
      }
    }
  }
}

// ---- the dK/dV kernel: one key block, every query tile that sees it ----------------------------------------
// grid (key blocks, batch·heads); block THREADS. T: __half or __nv_bfloat16. D: head_dim padded up
// to the instance. ATOMIC_DQ: also add this block's share of dQ into dq_accum (fp32, [rows, head_dim]).
template <class T, int D, bool ATOMIC_DQ>
__global__ void __launch_bounds__(THREADS)
    backward_dkdv(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v, const T* __restrict__ dout,
                  const float* __restrict__ lse, const float* __restrict__ delta, T* __restrict__ dk,
                  T* __restrict__ dv, float* __restrict__ dq_accum, int seq_q, int seq_k, int head_dim, float scale,
                  bool causal) {
  static_assert(D % 16 == 0, "whole 16-deep mma steps over head_dim");
  const float sl2 = scale * kLog2e;    // P = 2^(s·sl2 − LSE·log2e): one FFMA and one EX2 per element
  extern __shared__ uint4 smem[];      // uint4: 16-byte alignment for ldmatrix and cp.async
  T* Ks = reinterpret_cast<T*>(smem);  // [BLOCK_N, D] swizzled, this block's keys (whole kernel)
  T* Vs = Ks + BLOCK_N * D;            // [BLOCK_N, D] swizzled, this block's values (whole kernel)
  T* Qs = Vs + BLOCK_N * D;            // [2][BLOCK_M, D] swizzled: this query tile and the next
  T* dOs = Qs + 2 * BLOCK_M * D;       // [2][BLOCK_M, D] swizzled
  T* dSt = dOs + 2 * BLOCK_M * D;      // [BLOCK_N, BLOCK_M] swizzled: dSᵀ (ATOMIC_DQ only)
  float* lse_s = reinterpret_cast<float*>(dSt + BLOCK_N * BLOCK_M);  // [2][BLOCK_M] LSE·log2e (+inf: P = 0)
  float* delta_s = lse_s + 2 * BLOCK_M;                              // [2][BLOCK_M]

  const int n0 = blockIdx.x * BLOCK_N;  // first key of this block
  const std::size_t bh = blockIdx.y;    // flattened (batch, head)
  q += bh * seq_q * head_dim, dout += bh * seq_q * head_dim, lse += bh * seq_q, delta += bh * seq_q;
  k += bh * seq_k * head_dim, v += bh * seq_k * head_dim;
  if constexpr (ATOMIC_DQ) dq_accum += bh * seq_q * head_dim;
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int g = lane / 4, t4 = lane % 4;  // this lane's fragment rows (g, g+8) and column pair (2·t4)
  const int w0 = warp * 16;               // this warp's first key in the block

  // The query tiles that see this key block (step 08). Causal: tiles before t_begin (every query
  // < n0) see nothing; tiles from t_full on (first query >= the block's last key) see every key.
  const int n_q_tiles = (seq_q + BLOCK_M - 1) / BLOCK_M;
  const int t_begin = causal ? min(n0 / BLOCK_M, n_q_tiles) : 0;
  const int t_full = causal ? min((min(n0 + BLOCK_N, seq_k) - 1 + BLOCK_M - 1) / BLOCK_M, n_q_tiles) : 0;
  // The last key block, if ragged, is masked on every tile: its zero-filled keys have S = 0 and
  // P = 2^(−LSE·log2e), which may overflow, and then inf·0 = NaN in dQ.
  const bool ragged = n0 + BLOCK_N > seq_k;

  // Thread i < 64 fetches the LSE of query i of a tile, thread 64 + i its delta: into a register
  // when the tile's copies are issued, into shared memory a tile later (no wait on the load).
  auto fetch_row_stat = [&](int m0) -> float {
    const int row = m0 + threadIdx.x % BLOCK_M;
    if (threadIdx.x < BLOCK_M) return lse_log2(lse, row, seq_q);
    return row < seq_q ? delta[row] : 0.f;
  };
  auto store_row_stat = [&](int buf, float x) {
    (threadIdx.x < BLOCK_M ? lse_s : delta_s)[buf * BLOCK_M + threadIdx.x % BLOCK_M] = x;
  };
  auto issue_query_tile = [&](int t, int buf) {  // Q_t and dO_t into buffer buf
    copy_tile<BLOCK_M, D>(Qs + buf * BLOCK_M * D, q, t * BLOCK_M, seq_q, head_dim);
    copy_tile<BLOCK_M, D>(dOs + buf * BLOCK_M * D, dout, t * BLOCK_M, seq_q, head_dim);
  };

  // K_j and V_j for the whole kernel, and the first query tile: one commit group.
  copy_tile<BLOCK_N, D>(Ks, k, n0, seq_k, head_dim);
  copy_tile<BLOCK_N, D>(Vs, v, n0, seq_k, head_dim);
  if (t_begin < n_q_tiles) {
    issue_query_tile(t_begin, 0);
    store_row_stat(0, fetch_row_stat(t_begin * BLOCK_M));
  }
  cp_async_commit();

  float dk_acc[D / 8][4] = {};  // [16 keys, D] this warp's rows of dK (unscaled), C fragments: n-tile j = dims 8j..
  float dv_acc[D / 8][4] = {};  // [16 keys, D] this warp's rows of dV

  auto query_tile = [&](int t, auto masked) {
    const int m0 = t * BLOCK_M;  // first query of this tile
    const int buf = (t - t_begin) & 1;
    cp_async_wait<0>();  // this thread's copies of tile t have landed ...
    __syncthreads();     // ... and everyone's; every warp is also done with tile t-1 (buffer buf^1, dSᵀ)
    const bool more = t + 1 < n_q_tiles;
    float stat_next = 0.f;
    if (more) {  // the next tile's copies fly while this one is used
      issue_query_tile(t + 1, buf ^ 1);
      stat_next = fetch_row_stat(m0 + BLOCK_M);
    }
    cp_async_commit();
    const T *Qt = Qs + buf * BLOCK_M * D, *dOt = dOs + buf * BLOCK_M * D;
    const float *lse_t = lse_s + buf * BLOCK_M, *delta_t = delta_s + buf * BLOCK_M;

    // Sᵀ = K·Qᵀ: A this warp's K rows, B[d][query] = Q[query][d] from Q rows.
    float s[BLOCK_M / 8][4] = {};  // [16 keys, BLOCK_M] C fragments: n-tile j = queries m0+8j .. m0+8j+7
    mma_abt<D, T>(s, Ks, w0, Qt, lane);

    // Pᵀ, packed to fp16/bf16 pairs at once: as A fragments for dV, and (unpacked) for dS, so the fp32
    // Sᵀ registers are free before dPᵀ needs its own (d = 128 would spill otherwise). Element e of n-tile
    // j: key n0 + w0 + g + 8·(e/2), query m0 + 8j + 2·t4 + e%2; the LSE is the query's, a column of Sᵀ.
    // Masked tiles: keys after the query or past seq_k get P = 0. pf[kk]: k-step kk = n-tiles 2kk, 2kk+1.
    std::uint32_t pf[BLOCK_M / 16][4];
#pragma unroll
    for (int j = 0; j < BLOCK_M / 8; ++j)
#pragma unroll
      for (int h = 0; h < 2; ++h) {  // elements 2h, 2h+1: row g + 8h, queries 8j + 2·t4, +1
        float p[2];
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int col = 8 * j + 2 * t4 + e;  // query in the tile
          p[e] = exp2_approx(fmaf(s[j][2 * h + e], sl2, -lse_t[col]));
          if constexpr (decltype(masked)::value) {
            const int key = n0 + w0 + g + 8 * h;
            if (key >= seq_k || (causal && key > m0 + col)) p[e] = 0.f;
          }
        }
        pf[j / 2][j % 2 * 2 + h] = pack<T>(p[0], p[1]);
      }

      // dV += Pᵀ·dO. B[query][d] = dO[query][d]: two queries per register from rows that hold dims
      // side by side: ldmatrix.trans, as the forward reads V.
#pragma unroll
    for (int kk = 0; kk < BLOCK_M / 16; ++kk) mma_ab<D, T>(dv_acc, pf[kk], dOt, kk, lane);

    // dPᵀ = V·dOᵀ: as Sᵀ, with V for K and dO for Q.
    float ds[BLOCK_M / 8][4] = {};  // [16 keys, BLOCK_M] C fragments: dPᵀ, then dSᵀ
    mma_abt<D, T>(ds, Vs, w0, dOt, lane);

    // dSᵀ = Pᵀ ∘ (dPᵀ − delta), fp32 (P as rounded for dV); delta is the query's (the column).
#pragma unroll
    for (int j = 0; j < BLOCK_M / 8; ++j)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const float2 p = unpack<T>(pf[j / 2][j % 2 * 2 + h]);
        ds[j][2 * h] = p.x * (ds[j][2 * h] - delta_t[8 * j + 2 * t4]);
        ds[j][2 * h + 1] = p.y * (ds[j][2 * h + 1] - delta_t[8 * j + 2 * t4 + 1]);
      }

      // dK += dSᵀ·Q (unscaled; scale once at the end): as dV, with dSᵀ for Pᵀ and Q for dO.
#pragma unroll
    for (int kk = 0; kk < BLOCK_M / 16; ++kk) {
      const std::uint32_t a[4] = {pack<T>(ds[2 * kk][0], ds[2 * kk][1]), pack<T>(ds[2 * kk][2], ds[2 * kk][3]),
                                  pack<T>(ds[2 * kk + 1][0], ds[2 * kk + 1][1]),
                                  pack<T>(ds[2 * kk + 1][2], ds[2 * kk + 1][3])};
      mma_ab<D, T>(dk_acc, a, Qt, kk, lane);
    }

    if constexpr (ATOMIC_DQ) atomic_dq<T, D>(dq_accum, ds, dSt, Ks, m0, seq_q, head_dim, warp, lane);
    if (more) store_row_stat(buf ^ 1, stat_next);  // buffer buf^1 was tile t-1's: free since the barrier
  };
  int t = t_begin;
  for (; t < t_full; ++t) query_tile(t, std::true_type{});  // the diagonal: masked
  if (ragged)
    for (; t < n_q_tiles; ++t) query_tile(t, std::true_type{});  // the ragged last key block
  else
    for (; t < n_q_tiles; ++t) query_tile(t, std::false_type{});  // below the diagonal (all of them if not causal)
  cp_async_wait<0>();                                             // an empty group at most; nothing pending at exit
  __syncthreads();  // every warp is done with K and V (the dQ products read all 64 keys)

  // dK = scale·dK_acc and dV into this warp's own rows of the K and V tiles, then 16-byte stores (step 11's
  // epilogue). Keys past seq_k and padding columns are not stored; a block no query sees stores zeros.
#pragma unroll
  for (int j = 0; j < D / 8; ++j)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = w0 + g + 8 * h;
      *reinterpret_cast<std::uint32_t*>(Ks + swz<D>(r, j) + 2 * t4) =
          pack<T>(scale * dk_acc[j][2 * h], scale * dk_acc[j][2 * h + 1]);
      *reinterpret_cast<std::uint32_t*>(Vs + swz<D>(r, j) + 2 * t4) = pack<T>(dv_acc[j][2 * h], dv_acc[j][2 * h + 1]);
    }
  __syncwarp();
  dk += bh * seq_k * head_dim, dv += bh * seq_k * head_dim;
  constexpr int CHUNKS = D / 8;
#pragma unroll
  for (int i = lane; i < 16 * CHUNKS; i += kWarp) {
    const int r = w0 + i / CHUNKS, c = i % CHUNKS;
    if (n0 + r < seq_k && 8 * c < head_dim) {
      const std::size_t at = std::size_t(n0 + r) * head_dim + 8 * c;
      *reinterpret_cast<uint4*>(dk + at) = *reinterpret_cast<const uint4*>(Ks + swz<D>(r, c));
      *reinterpret_cast<uint4*>(dv + at) = *reinterpret_cast<const uint4*>(Vs + swz<D>(r, c));
    }
  }
}

// ---- atomic variant: dQ = scale·dQ_accum -> fp16/bf16 ------------------------------------------------------
// n = rows·head_dim, a multiple of 8: 4 floats in, 4 elements (8 bytes) out per thread.
constexpr int kConvertThreads = 256;
template <class T>
__global__ void __launch_bounds__(kConvertThreads)
    convert_dq(const float* __restrict__ acc, T* __restrict__ dq, long long n, float scale) {
  const long long i = 4 * ((long long)blockIdx.x * kConvertThreads + threadIdx.x);
  if (i >= n) return;
  const float4 a = *reinterpret_cast<const float4*>(acc + i);
  *reinterpret_cast<uint2*>(dq + i) = make_uint2(pack<T>(scale * a.x, scale * a.y), pack<T>(scale * a.z, scale * a.w));
}

// ---- deterministic variant: the dQ kernel, one query block, every key tile it sees --------------------------
// grid (query blocks, batch·heads); block THREADS; each warp owns 16 queries. Step 08's dQ kernel
// on tensor cores, the forward's way round: S = Q·Kᵀ exactly as steps 09-11 compute it.
template <class T, int D>
__global__ void __launch_bounds__(THREADS)
    backward_dq(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v, const T* __restrict__ dout,
                const float* __restrict__ lse, const float* __restrict__ delta, T* __restrict__ dq, int seq_q,
                int seq_k, int head_dim, float scale, bool causal) {
  static_assert(D % 16 == 0, "whole 16-deep mma steps over head_dim");
  const float sl2 = scale * kLog2e;
  extern __shared__ uint4 smem[];
  T* Qs = reinterpret_cast<T*>(smem);  // [BLOCK_M, D] swizzled (whole kernel); the dQ tile at the end
  T* dOs = Qs + BLOCK_M * D;           // [BLOCK_M, D] swizzled (whole kernel)
  T* Ks = dOs + BLOCK_M * D;           // [2][BLOCK_N, D] swizzled: this key tile and the next
  T* Vs = Ks + 2 * BLOCK_N * D;        // [2][BLOCK_N, D] swizzled

  // Causal: the last query block (the most key tiles) runs first, as in step 06.
  const int qb = causal ? gridDim.x - 1 - blockIdx.x : blockIdx.x;
  const int m0 = qb * BLOCK_M;        // first query of this block
  const std::size_t bh = blockIdx.y;  // flattened (batch, head)
  q += bh * seq_q * head_dim, dout += bh * seq_q * head_dim, lse += bh * seq_q, delta += bh * seq_q;
  k += bh * seq_k * head_dim, v += bh * seq_k * head_dim;
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int g = lane / 4, t4 = lane % 4;
  const int w0 = warp * 16;  // this warp's first query in the block

  // The stages of step 06.
  const int kv_end = causal ? min(seq_k, min(m0 + BLOCK_M, seq_q)) : seq_k;
  const int n_tiles = (kv_end + BLOCK_N - 1) / BLOCK_N;
  const int n_full = (causal ? min(m0 + 1, seq_k) : seq_k) / BLOCK_N;

  auto issue_key_tile = [&](int t, int buf) {  // K_t and V_t into buffer buf
    copy_tile<BLOCK_N, D>(Ks + buf * BLOCK_N * D, k, t * BLOCK_N, seq_k, head_dim);
    copy_tile<BLOCK_N, D>(Vs + buf * BLOCK_N * D, v, t * BLOCK_N, seq_k, head_dim);
  };
  copy_tile<BLOCK_M, D>(Qs, q, m0, seq_q, head_dim);
  copy_tile<BLOCK_M, D>(dOs, dout, m0, seq_q, head_dim);
  if (n_tiles > 0) issue_key_tile(0, 0);
  cp_async_commit();

  // LSE·log2e and delta of this lane's rows g and g + 8, for the whole kernel.
  float lse2[2], dlt[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = m0 + w0 + g + 8 * h;
    lse2[h] = lse_log2(lse, row, seq_q);
    dlt[h] = row < seq_q ? delta[row] : 0.f;
  }

  float acc[D / 8][4] = {};  // [16 queries, D] this warp's rows of dQ (unscaled), C fragments

  auto key_tile = [&](int t, auto masked) {
    const int n0 = t * BLOCK_N;  // first key of this tile
    const int buf = t & 1;
    cp_async_wait<0>();
    __syncthreads();  // tile t is in; every warp is done with tile t-1 (buffer buf^1)
    if (t + 1 < n_tiles) issue_key_tile(t + 1, buf ^ 1);
    cp_async_commit();
    const T *Kt = Ks + buf * BLOCK_N * D, *Vt = Vs + buf * BLOCK_N * D;

    // S = Q·Kᵀ and dP = dO·Vᵀ: the forward's S, twice (A: this warp's rows; B: K or V rows).
    float s[BLOCK_N / 8][4] = {}, ds[BLOCK_N / 8][4] = {};  // [16 queries, BLOCK_N] C fragments: P, then dS
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      std::uint32_t aq[4], ao[4];
      ldmatrix_x4(aq, Qs + swz<D>(w0 + lane % 16, 2 * kk + lane / 16));
      ldmatrix_x4(ao, dOs + swz<D>(w0 + lane % 16, 2 * kk + lane / 16));
#pragma unroll
      for (int jj = 0; jj < BLOCK_N / 16; ++jj) {
        std::uint32_t b[4];
        ldmatrix_x4(b, Kt + swz<D>(jj * 16 + lane % 8 + lane / 16 * 8, 2 * kk + lane / 8 % 2));
        mma_16816<T>(s[2 * jj], aq, b[0], b[1]);
        mma_16816<T>(s[2 * jj + 1], aq, b[2], b[3]);
        ldmatrix_x4(b, Vt + swz<D>(jj * 16 + lane % 8 + lane / 16 * 8, 2 * kk + lane / 8 % 2));
        mma_16816<T>(ds[2 * jj], ao, b[0], b[1]);
        mma_16816<T>(ds[2 * jj + 1], ao, b[2], b[3]);
      }
    }

    // P = 2^(S·sl2 − LSE·log2e) and dS = P ∘ (dP − delta). Element e of n-tile j: row
    // m0 + w0 + g + 8·(e/2), key n0 + 8j + 2·t4 + e%2. Masked tiles: keys after the query or past seq_k.
#pragma unroll
    for (int j = 0; j < BLOCK_N / 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int h = e / 2;
        float p = exp2_approx(fmaf(s[j][e], sl2, -lse2[h]));
        if constexpr (decltype(masked)::value) {
          const int row = m0 + w0 + g + 8 * h, key = n0 + 8 * j + 2 * t4 + e % 2;
          if (key >= (causal ? min(row + 1, seq_k) : seq_k)) p = 0.f;
        }
        ds[j][e] = p * (ds[j][e] - dlt[h]);
      }

      // dQ += dS·K: dS from registers (the forward's P trick), B[key][d] = K[key][d] by ldmatrix.trans.
#pragma unroll
    for (int kk = 0; kk < BLOCK_N / 16; ++kk) {
      const std::uint32_t a[4] = {pack<T>(ds[2 * kk][0], ds[2 * kk][1]), pack<T>(ds[2 * kk][2], ds[2 * kk][3]),
                                  pack<T>(ds[2 * kk + 1][0], ds[2 * kk + 1][1]),
                                  pack<T>(ds[2 * kk + 1][2], ds[2 * kk + 1][3])};
      mma_ab<D, T>(acc, a, Kt, kk, lane);
    }
  };
  int t = 0;
  for (; t < n_full; ++t) key_tile(t, std::false_type{});  // left of the diagonal, no mask
  for (; t < n_tiles; ++t) key_tile(t, std::true_type{});  // the diagonal and the ragged end of the keys
  cp_async_wait<0>();

  // dQ = scale·acc into this warp's own rows of the Q tile (only this warp read them: a warp
  // barrier suffices), then 16-byte stores (step 11's epilogue).
  __syncwarp();
#pragma unroll
  for (int j = 0; j < D / 8; ++j)
#pragma unroll
    for (int h = 0; h < 2; ++h)
      *reinterpret_cast<std::uint32_t*>(Qs + swz<D>(w0 + g + 8 * h, j) + 2 * t4) =
          pack<T>(scale * acc[j][2 * h], scale * acc[j][2 * h + 1]);
  __syncwarp();
  dq += bh * seq_q * head_dim;
  constexpr int CHUNKS = D / 8;
#pragma unroll
  for (int i = lane; i < 16 * CHUNKS; i += kWarp) {
    const int r = w0 + i / CHUNKS, c = i % CHUNKS;
    if (m0 + r < seq_q && 8 * c < head_dim)
      *reinterpret_cast<uint4*>(dq + std::size_t(m0 + r) * head_dim + 8 * c) =
          *reinterpret_cast<const uint4*>(Qs + swz<D>(r, c));
  }
}

// ---- workspace and launcher ----------------------------------------------------------------------------------
// [dQ_accum fp32 [rows, head_dim] (atomic only) | delta fp32 [rows]], rows = batch·heads·seq_q.
// dQ_accum first: 16-byte aligned for the convert kernel's float4 loads, and rows·head_dim·4 is a
// multiple of 32 bytes, so delta is aligned too.
std::size_t rows_of(const fa::AttnParams& p) { return std::size_t(p.batch) * p.heads * p.seq_q; }
std::size_t dq_accum_bytes(const fa::AttnParams& p) {
  return p.variant == kAtomic ? rows_of(p) * p.head_dim * sizeof(float) : 0;
}
std::size_t bwd_workspace(const fa::AttnParams& p) { return dq_accum_bytes(p) + rows_of(p) * sizeof(float); }

template <class T, int D>
void launch(const fa::AttnBwdArgs& a, cudaStream_t stream) {
  using S = Smem<D>;
  static const bool ready = [] {  // once per instance: more than 48 KB of dynamic shared memory
    fa::opt_in_shared_memory(backward_dkdv<T, D, true>, S::DKDV_BYTES, info().name);
    fa::opt_in_shared_memory(backward_dkdv<T, D, false>, S::DKDV_BYTES, info().name);
    fa::opt_in_shared_memory(backward_dq<T, D>, S::DQ_BYTES, info().name);
    return true;
  }();
  (void)ready;
  const fa::AttnParams& p = a.p;
  const auto *q = static_cast<const T*>(a.q), *k = static_cast<const T*>(a.k), *v = static_cast<const T*>(a.v),
             *o = static_cast<const T*>(a.o), *dout = static_cast<const T*>(a.dout);
  auto *dq = static_cast<T*>(a.dq), *dk = static_cast<T*>(a.dk), *dv = static_cast<T*>(a.dv);
  const bool atomic = p.variant == kAtomic;
  char* ws = static_cast<char*>(a.workspace);
  float* dq_accum = atomic ? reinterpret_cast<float*>(ws) : nullptr;
  float* delta = reinterpret_cast<float*>(ws + dq_accum_bytes(p));

  const long long rows = (long long)rows_of(p);
  constexpr int kRowsPerBlock = kDeltaThreads / kWarp;
  backward_delta<T><<<unsigned((rows + kRowsPerBlock - 1) / kRowsPerBlock), kDeltaThreads, 0, stream>>>(
      o, dout, delta, rows, p.head_dim);
  FA_CHECK_LAUNCH();

  const dim3 grid_kv((p.seq_k + BLOCK_N - 1) / BLOCK_N, p.batch * p.heads);
  if (atomic) {
    FA_CUDA_CHECK(cudaMemsetAsync(dq_accum, 0, dq_accum_bytes(p), stream));
    backward_dkdv<T, D, true><<<grid_kv, THREADS, S::DKDV_BYTES, stream>>>(
        q, k, v, dout, a.lse, delta, dk, dv, dq_accum, p.seq_q, p.seq_k, p.head_dim, p.scale, p.causal);
    FA_CHECK_LAUNCH();
    const long long n = rows * p.head_dim;  // a multiple of 8
    convert_dq<T><<<unsigned((n / 4 + kConvertThreads - 1) / kConvertThreads), kConvertThreads, 0, stream>>>(
        dq_accum, dq, n, p.scale);
    FA_CHECK_LAUNCH();
    return;
  }
  // Deterministic: the two kernels read delta and write disjoint outputs, so they run side by
  // side (step 07's fork, after delta).
  fa::StreamFork fork(stream);
  backward_dkdv<T, D, false><<<grid_kv, THREADS, S::DKDV_BYTES, fork.side()>>>(
      q, k, v, dout, a.lse, delta, dk, dv, nullptr, p.seq_q, p.seq_k, p.head_dim, p.scale, p.causal);
  FA_CHECK_LAUNCH();
  const dim3 grid_q((p.seq_q + BLOCK_M - 1) / BLOCK_M, p.batch * p.heads);
  backward_dq<T, D><<<grid_q, THREADS, S::DQ_BYTES, stream>>>(q, k, v, dout, a.lse, delta, dq, p.seq_q, p.seq_k,
                                                              p.head_dim, p.scale, p.causal);
  FA_CHECK_LAUNCH();
  fork.join();
}

template <class T>
void launch_dim(const fa::AttnBwdArgs& a, cudaStream_t stream) {
  // head_dim is padded up to an instance with zeros: they add nothing to the products, and the
  // padding columns of dQ, dK, dV are never stored.
  if (a.p.head_dim <= 64)
    launch<T, 64>(a, stream);
  else
    launch<T, 128>(a, stream);
}

void backward(const fa::AttnBwdArgs& a, cudaStream_t stream) {
  fa::check_attention_launch(info(), a.p, {a.q, a.k, a.v, a.o, a.dout, a.dq, a.dk, a.dv},
                             "Q, K, V, O, dO, dQ, dK and dV");
  if (a.p.variant != kAtomic && a.p.variant != kDeterministic)
    throw fa::UsageError(std::string(info().name) + ": no variant " + std::to_string(a.p.variant) +
                         " (0: deterministic, 1: atomic)");
  if (!a.workspace)
    throw fa::UsageError(std::string(info().name) + ": the backward needs its workspace (" + info().workspace_note +
                         ")");
  if (a.p.dtype == fa::DType::F16)
    launch_dim<__half>(a, stream);
  else
    launch_dim<__nv_bfloat16>(a, stream);
}

// The FlashAttention-2 benchmark shape at seq 2048, head_dim 64 (batch 8, 32 heads), fp16, fwd + bwd.
fa::Problem default_problem() {
  fa::Problem p = fa::fa2_problem(2048, 64, /*causal=*/false, fa::DType::F16);
  p.backward = true;
  return p;
}

const fa::StepInfo& info() {
  static const fa::StepInfo i = [] {
    fa::StepInfo s{"12_tensor_core_backward",
                   "the backward on tensor cores: mma.sync for the five products, dQ by fp32 atomics or a "
                   "deterministic pass",
                   fa::Family::Attention};
    s.attn_fwd = step11::info().attn_fwd;
    s.attn_bwd = backward;
    s.attn_rule = {{fa::DType::F16, fa::DType::BF16}, 128, 8};
    s.attn_rule.positive_scale = true;  // step 11's forward takes the row max on unscaled scores
    s.variants = {"deterministic", "atomic"};
    s.bwd_workspace_bytes = bwd_workspace;
    s.workspace_note = "delta, batch·heads·seq_q fp32; atomic variant: also dQ_accum, batch·heads·seq_q·head_dim fp32";
    s.default_problem = default_problem;
    return s;
  }();
  return i;
}

}  // namespace step12
