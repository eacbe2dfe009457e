// =============================================================================================
// FlashAttention from scratch, step by step, in CUDA C++
// Step 01: safe softmax, three passes over each row
//
//   y_j = exp(x_j - m) / l,   m = max_k x_k,   l = sum_k exp(x_k - m)
//
// Pass 1 reads the row for m, pass 2 reads it again for l, pass 3 reads it a third time and
// writes y: 3 reads + 1 write per element. Subtracting m keeps every exp() argument <= 0, so
// nothing overflows however large x is. This is the baseline: step 02 fuses passes 1 and 2.
//
// Parallel layout: one thread block per row (reductions: warp shuffles, then shared memory).
// A few very long rows cannot fill the GPU that way, so they are cut into chunks of kChunk
// elements, one block each, and the three passes become three kernels that exchange per-chunk
// partial results through a small workspace.
//
// Build + run:  cmake --build build --target 01_safe_softmax && build/bin/01_safe_softmax
// Read with:    docs/01_safe_softmax.md
// =============================================================================================
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "check.h"
#include "launch.h"
#include "ops.h"

namespace step01 {

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

// ---- reductions -----------------------------------------------------------------------------
struct Max {
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};
struct Sum {
  __device__ float operator()(float a, float b) const { return a + b; }
};

template <class Op>
__device__ float warp_reduce(float v, Op op) {
  // Butterfly: after log2(32) = 5 exchanges every lane holds the warp's result.
#pragma unroll
  for (int offset = kWarp / 2; offset > 0; offset /= 2) v = op(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

// Every thread of the block gets the block's result.
template <class Op>
__device__ float block_reduce(float v, Op op, float identity) {
  __shared__ float per_warp[kMaxThreads / kWarp];  // [32] one partial per warp
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  v = warp_reduce(v, op);
  if (lane == 0) per_warp[warp] = v;
  __syncthreads();
  v = lane < int(blockDim.x / kWarp) ? per_warp[lane] : identity;
  v = warp_reduce(v, op);
  __syncthreads();  // per_warp[] is reused by the next reduction
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

// Calls f(x) for every element of [begin, end) that this thread owns (and for some -inf pads).
// Why batches: all kBatch loads are issued before the first is used, so each thread keeps
// kBatch requests in flight instead of one; that is what hides DRAM latency on short rows.
template <int VEC, class F>
__device__ void for_each_element(const float* row, int begin, int end, F f) {
  const Vec<VEC>* rv = reinterpret_cast<const Vec<VEC>*>(row);
  const int last = end / VEC;
  for (int base = begin / VEC + threadIdx.x; base < last; base += kBatch * blockDim.x) {
    Vec<VEC> v[kBatch];  // [kBatch] vectors in registers
    load_batch<VEC>(rv, base, last, v);
#pragma unroll
    for (int u = 0; u < kBatch; ++u) apply(v[u], f);
  }
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

// ---- one block per row: the three passes in one kernel ---------------------------------------
template <int VEC>
__global__ void __launch_bounds__(kMaxThreads, kMinBlocks)
    softmax_rows(const float* __restrict__ x, float* __restrict__ y, float* __restrict__ lse, int cols) {
  const float* xr = x + size_t(blockIdx.x) * cols;  // [cols] this block's row
  float* yr = y + size_t(blockIdx.x) * cols;

  float m = -INFINITY;  // pass 1: the row max (reads x)
  for_each_element<VEC>(xr, 0, cols, [&](float v) { m = fmaxf(m, v); });
  m = safe_shift(block_reduce(m, Max{}, -INFINITY));

  float l = 0.f;  // pass 2: the sum of exp(x - m) (reads x again)
  for_each_element<VEC>(xr, 0, cols, [&](float v) { l += expf(v - m); });
  l = block_reduce(l, Sum{}, 0.f);

  normalise<VEC>(xr, yr, 0, cols, m, safe_inverse(l));         // pass 3: reads x a third time, writes y
  if (lse && threadIdx.x == 0) lse[blockIdx.x] = m + logf(l);  // log sum_j exp(x_j), if asked
}

// ---- long rows: one block per (chunk, row), the three passes as three kernels ---------------
// grid (chunks, rows); part_max, part_sum: [rows, chunks] in the workspace.
template <int VEC>
__global__ void __launch_bounds__(kMaxThreads, kMinBlocks)
    chunk_max(const float* __restrict__ x, float* __restrict__ part_max, int cols) {
  const int chunks = gridDim.x, begin = blockIdx.x * kChunk, end = min(cols, begin + kChunk);
  float m = -INFINITY;
  for_each_element<VEC>(x + size_t(blockIdx.y) * cols, begin, end, [&](float v) { m = fmaxf(m, v); });
  m = block_reduce(m, Max{}, -INFINITY);
  if (threadIdx.x == 0) part_max[blockIdx.y * chunks + blockIdx.x] = m;
}

// The row max from the per-chunk maxima (a few hundred values: every block redoes it).
__device__ float row_max(const float* part_max, int chunks) {
  float m = -INFINITY;
  for (int c = threadIdx.x; c < chunks; c += blockDim.x) m = fmaxf(m, part_max[blockIdx.y * chunks + c]);
  return safe_shift(block_reduce(m, Max{}, -INFINITY));
}

template <int VEC>
__global__ void __launch_bounds__(kMaxThreads, kMinBlocks)
    chunk_sum(const float* __restrict__ x, const float* __restrict__ part_max, float* __restrict__ part_sum, int cols) {
  const int chunks = gridDim.x, begin = blockIdx.x * kChunk, end = min(cols, begin + kChunk);
  const float m = row_max(part_max, chunks);
  float l = 0.f;
  for_each_element<VEC>(x + size_t(blockIdx.y) * cols, begin, end, [&](float v) { l += expf(v - m); });
  l = block_reduce(l, Sum{}, 0.f);
  if (threadIdx.x == 0) part_sum[blockIdx.y * chunks + blockIdx.x] = l;
}

template <int VEC>
__global__ void __launch_bounds__(kMaxThreads, kMinBlocks)
    chunk_normalise(const float* __restrict__ x, float* __restrict__ y, float* __restrict__ lse,
                    const float* __restrict__ part_max, const float* __restrict__ part_sum, int cols) {
  const int chunks = gridDim.x, begin = blockIdx.x * kChunk, end = min(cols, begin + kChunk);
  const float m = row_max(part_max, chunks);
  float l = 0.f;
  for (int c = threadIdx.x; c < chunks; c += blockDim.x) l += part_sum[blockIdx.y * chunks + c];
  l = block_reduce(l, Sum{}, 0.f);
  const size_t row = size_t(blockIdx.y) * cols;
  if (lse && blockIdx.x == 0 && threadIdx.x == 0) lse[blockIdx.y] = m + logf(l);
  normalise<VEC>(x + row, y + row, begin, end, m, safe_inverse(l));
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
  float* part = nullptr;  // [2, rows, chunks]: per-chunk max, then per-chunk sum
  FA_CUDA_CHECK(cudaMallocAsync(&part, 2 * sizeof(float) * size_t(a.rows) * chunks, stream));
  float* part_max = part;
  float* part_sum = part + size_t(a.rows) * chunks;
  const dim3 grid(chunks, a.rows);
  chunk_max<VEC><<<grid, kMaxThreads, 0, stream>>>(a.x, part_max, a.cols);
  FA_CHECK_LAUNCH();
  chunk_sum<VEC><<<grid, kMaxThreads, 0, stream>>>(a.x, part_max, part_sum, a.cols);
  FA_CHECK_LAUNCH();
  chunk_normalise<VEC><<<grid, kMaxThreads, 0, stream>>>(a.x, a.y, a.lse, part_max, part_sum, a.cols);
  FA_CHECK_LAUNCH();
  FA_CUDA_CHECK(cudaFreeAsync(part, stream));
}

void launch(const fa::SoftmaxArgs& a, cudaStream_t stream) {
  static_assert(kMaxThreads % kWarp == 0 && kMaxThreads / kWarp <= kWarp,
                "block_reduce finishes with one warp: at most 32 warps per block");
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
  static const fa::StepInfo i{"01_safe_softmax", "three passes: max, sum of exp(x - max), normalise",
                              fa::Family::Softmax, launch};
  return i;
}

}  // namespace step01
