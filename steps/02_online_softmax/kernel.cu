// =============================================================================================
// FlashAttention from scratch, step by step, in CUDA C++
// Step 02: online softmax, max and sum fused into one pass (Milakov & Gimelshein, 2018)
//
// What changes since step 01: passes 1 and 2 become one. Each thread keeps a pair (m, l), the
// running max of what it has seen and the sum of exp(x - m) over it, and rescales l whenever
// the max grows:
//
//   m_i = max(m_{i-1}, x_i),   l_i = l_{i-1} * exp(m_{i-1} - m_i) + exp(x_i - m_i)
//
// Pairs from different threads, warps and chunks merge with the same rule, so the reductions
// now combine (m, l) pairs instead of plain maxima and sums. Per element: 2 reads + 1 write
// (step 01: 3 + 1). The price is one extra exp() per rescale; the pass structure is what
// FlashAttention keeps for every row of S.
//
// Parallel layout: as step 01. Split rows need two kernels instead of three.
//
// Build + run:  cmake --build build --target 02_online_softmax && build/bin/02_online_softmax
// Read with:    docs/02_online_softmax.md
// =============================================================================================
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "check.h"
#include "launch.h"
#include "ops.h"

namespace step02 {

constexpr int kWarp = 32;
constexpr int kMaxThreads = 1024;                      // one block handles a row (or a chunk) with up to 32 warps
constexpr int kElemsPerThread = 16;                    // 4 float4 loads per thread per pass (one batch, below)
constexpr int kMinBlocks = 2048 / kMaxThreads;         // keep 2048 threads per SM resident: <= 32 registers
constexpr int kChunk = kMaxThreads * kElemsPerThread;  // 16384: row slice per block when split
static_assert(kChunk % 4 == 0, "chunks must start on a float4 boundary for the vector path");

// A row that is entirely -inf has m = -inf and x - m = -inf - (-inf) = NaN. Treat it as
// "attends to nothing": shift by 0 instead, so every exp() is 0, l = 0, and y = 0.
__device__ float safe_shift(float m) { return m == -INFINITY ? 0.f : m; }
// l == 0 only for such a row; a NaN l (NaN or +inf in the row) stays NaN and poisons y.
__device__ float safe_inverse(float l) { return l == 0.f ? 0.f : 1.f / l; }

// ---- the (m, l) pair and its merge ------------------------------------------------------------
struct MaxSum {
  float m;  // max of the elements seen
  float l;  // sum of exp(x - m) over them
};
constexpr MaxSum kEmpty{-INFINITY, 0.f};

// Two partial results over disjoint sets of elements -> the result over their union. Each sum
// is rescaled to the common max: exp(x - m_a) * exp(m_a - m) = exp(x - m).
__device__ MaxSum merge(MaxSum a, MaxSum b) {
  const float m = fmaxf(a.m, b.m);
  const float s = safe_shift(m);
  return {m, a.l * expf(a.m - s) + b.l * expf(b.m - s)};
}

__device__ MaxSum warp_merge(MaxSum v) {
#pragma unroll
  for (int offset = kWarp / 2; offset > 0; offset /= 2)
    v = merge(v, {__shfl_xor_sync(0xffffffffu, v.m, offset), __shfl_xor_sync(0xffffffffu, v.l, offset)});
  return v;
}

// Every thread of the block gets the block's (m, l).
__device__ MaxSum block_merge(MaxSum v) {
  __shared__ MaxSum per_warp[kMaxThreads / kWarp];  // [32] one pair per warp
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  v = warp_merge(v);
  if (lane == 0) per_warp[warp] = v;
  __syncthreads();
  v = lane < int(blockDim.x / kWarp) ? per_warp[lane] : kEmpty;
  v = warp_merge(v);
  __syncthreads();  // per_warp[] may be reused
  return v;
}

// ---- element access -------------------------------------------------------------------------
// VEC = 4 moves 16 bytes per load and store (LDG.128 / STG.128). The launcher picks it only when
// every row starts on a 16-byte boundary; then begin and end are multiples of 4 as well.
template <int VEC>
using Vec = std::conditional_t<VEC == 4, float4, float>;

template <class F>
__device__ void apply(float v, F f) {
  f(v);
}
template <class F>
__device__ void apply(float4 v, F f) {
  f(v.x), f(v.y), f(v.z), f(v.w);
}
template <int VEC>
__device__ Vec<VEC> neg_inf() {
  if constexpr (VEC == 4)
    return make_float4(-INFINITY, -INFINITY, -INFINITY, -INFINITY);
  else
    return -INFINITY;
}

// This thread's next kBatch vectors of a row: v[u] = row[base + u * blockDim.x] (consecutive
// threads, consecutive addresses: coalesced). Past `last` it pads with -inf, which neither a
// max nor a sum of exp() notices.
constexpr int kBatch = 4;
template <int VEC>
__device__ void load_batch(const Vec<VEC>* row, int base, int last, Vec<VEC> (&v)[kBatch]) {
#pragma unroll
  for (int u = 0; u < kBatch; ++u) {
    const int i = base + u * blockDim.x;
    v[u] = i < last ? row[i] : neg_inf<VEC>();
  }
}

// ---- the fused pass ----------------------------------------------------------------------------
// (m, l) over the elements [begin, end) of a row, merged over the block: ONE read of x.
template <int VEC>
__device__ MaxSum online_stats(const float* row, int begin, int end) {
  const Vec<VEC>* rv = reinterpret_cast<const Vec<VEC>*>(row);
  const int last = end / VEC;
  MaxSum t = kEmpty;  // this thread's running pair
  for (int base = begin / VEC + threadIdx.x; base < last; base += kBatch * blockDim.x) {
    Vec<VEC> v[kBatch];  // [kBatch] vectors in registers
    load_batch<VEC>(rv, base, last, v);
    // The recurrence, one batch (up to 16 elements) per step: the batch's max first, so l is
    // rescaled once per batch, not once per element.
    float m = t.m;
#pragma unroll
    for (int u = 0; u < kBatch; ++u) apply(v[u], [&](float x) { m = fmaxf(m, x); });
    const float s = safe_shift(m);
    float batch_l = 0.f;
#pragma unroll
    for (int u = 0; u < kBatch; ++u) apply(v[u], [&](float x) { batch_l += expf(x - s); });
    t.l = t.l * expf(t.m - s) + batch_l;  // l_new = l_old * e^(m_old - m_new) + sum e^(x - m_new)
    t.m = m;
  }
  return block_merge(t);
}

__device__ float exp_scaled(float x, float m, float s) { return expf(x - m) * s; }
__device__ float4 exp_scaled(float4 x, float m, float s) {
  return make_float4(exp_scaled(x.x, m, s), exp_scaled(x.y, m, s), exp_scaled(x.z, m, s), exp_scaled(x.w, m, s));
}

// Writes y = exp(x - m) * inv_l over [begin, end), in the same batches.
template <int VEC>
__device__ void normalise(const float* x, float* y, int begin, int end, float m, float inv_l) {
  const Vec<VEC>* xv = reinterpret_cast<const Vec<VEC>*>(x);
  Vec<VEC>* yv = reinterpret_cast<Vec<VEC>*>(y);
  const int last = end / VEC;
  for (int base = begin / VEC + threadIdx.x; base < last; base += kBatch * blockDim.x) {
    Vec<VEC> v[kBatch];  // [kBatch] vectors in registers
    load_batch<VEC>(xv, base, last, v);
#pragma unroll
    for (int u = 0; u < kBatch; ++u)
      if (const int i = base + u * blockDim.x; i < last) yv[i] = exp_scaled(v[u], m, inv_l);
  }
}

// ---- one block per row: the fused pass, then normalise ------------------------------------------
template <int VEC>
__global__ void __launch_bounds__(kMaxThreads, kMinBlocks)
    softmax_rows(const float* __restrict__ x, float* __restrict__ y, float* __restrict__ lse, int cols) {
  const float* xr = x + size_t(blockIdx.x) * cols;  // [cols] this block's row
  float* yr = y + size_t(blockIdx.x) * cols;

  const MaxSum r = online_stats<VEC>(xr, 0, cols);                             // pass 1: m and l together (reads x)
  normalise<VEC>(xr, yr, 0, cols, safe_shift(r.m), safe_inverse(r.l));         // pass 2: reads x, writes y
  if (lse && threadIdx.x == 0) lse[blockIdx.x] = safe_shift(r.m) + logf(r.l);  // log sum_j exp(x_j), if asked
}

// ---- long rows: one block per (chunk, row), two kernels ------------------------------------------
// grid (chunks, rows); part: [rows, chunks] (m, l) pairs in the workspace.
template <int VEC>
__global__ void __launch_bounds__(kMaxThreads, kMinBlocks)
    chunk_stats(const float* __restrict__ x, MaxSum* __restrict__ part, int cols) {
  const int chunks = gridDim.x, begin = blockIdx.x * kChunk, end = min(cols, begin + kChunk);
  const MaxSum r = online_stats<VEC>(x + size_t(blockIdx.y) * cols, begin, end);
  if (threadIdx.x == 0) part[blockIdx.y * chunks + blockIdx.x] = r;
}

template <int VEC>
__global__ void __launch_bounds__(kMaxThreads, kMinBlocks)
    chunk_normalise(const float* __restrict__ x, float* __restrict__ y, float* __restrict__ lse,
                    const MaxSum* __restrict__ part, int cols) {
  const int chunks = gridDim.x, begin = blockIdx.x * kChunk, end = min(cols, begin + kChunk);
  // The row's (m, l) from its chunks' pairs (a few hundred: every block redoes the merge).
  MaxSum r = kEmpty;
  for (int c = threadIdx.x; c < chunks; c += blockDim.x) r = merge(r, part[blockIdx.y * chunks + c]);
  r = block_merge(r);
  const size_t row = size_t(blockIdx.y) * cols;
  if (lse && blockIdx.x == 0 && threadIdx.x == 0) lse[blockIdx.y] = safe_shift(r.m) + logf(r.l);
  normalise<VEC>(x + row, y + row, begin, end, safe_shift(r.m), safe_inverse(r.l));
}

// ---- launch configuration --------------------------------------------------------------------
// About kElemsPerThread elements per thread, whole warps, at most kMaxThreads.
inline int threads_for(long long elems) {
  const long long warps = (elems + kWarp * kElemsPerThread - 1) / (kWarp * kElemsPerThread);
  return int(std::min<long long>(std::max<long long>(warps, 1), kMaxThreads / kWarp)) * kWarp;
}

template <int VEC>
void launch_vec(const fa::SoftmaxArgs& a, cudaStream_t stream) {
  // Enough rows to fill every SM several times over: one block per row.
  if (a.cols <= kChunk || a.rows >= 4 * fa::sm_count()) {
    softmax_rows<VEC><<<a.rows, threads_for(a.cols), 0, stream>>>(a.x, a.y, a.lse, a.cols);
    FA_CHECK_LAUNCH();
    return;
  }
  // Few long rows: split each into chunks so the grid has enough blocks.
  const int chunks = (a.cols + kChunk - 1) / kChunk;
  MaxSum* part = nullptr;  // [rows, chunks]: per-chunk (m, l)
  FA_CUDA_CHECK(cudaMallocAsync(&part, sizeof(MaxSum) * size_t(a.rows) * chunks, stream));
  const dim3 grid(chunks, a.rows);
  chunk_stats<VEC><<<grid, kMaxThreads, 0, stream>>>(a.x, part, a.cols);
  FA_CHECK_LAUNCH();
  chunk_normalise<VEC><<<grid, kMaxThreads, 0, stream>>>(a.x, a.y, a.lse, part, a.cols);
  FA_CHECK_LAUNCH();
  FA_CUDA_CHECK(cudaFreeAsync(part, stream));
}

void launch(const fa::SoftmaxArgs& a, cudaStream_t stream) {
  static_assert(kMaxThreads % kWarp == 0 && kMaxThreads / kWarp <= kWarp,
                "block_merge finishes with one warp: at most 32 warps per block");
  if (a.rows < 1 || a.cols < 1) throw fa::UsageError("softmax needs rows >= 1 and cols >= 1");
  // 16-byte vector loads need every row to start on a 16-byte boundary.
  const bool aligned =
      a.cols % 4 == 0 && reinterpret_cast<uintptr_t>(a.x) % 16 == 0 && reinterpret_cast<uintptr_t>(a.y) % 16 == 0;
  if (aligned)
    launch_vec<4>(a, stream);
  else
    launch_vec<1>(a, stream);
}

const fa::StepInfo& info() {
  static const fa::StepInfo i{"02_online_softmax", "online softmax: max and sum fused in one pass, then normalise",
                              fa::Family::Softmax, launch};
  return i;
}

}  // namespace step02
