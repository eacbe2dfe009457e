// split_merge.cuh: the merge of split-KV partials that step 22 teaches and step 23 reuses unchanged, for it to
// include ("inline first, shared later", docs/conventions.md): step 22 writes it out in its kernel.cu ("the
// merge"), where docs/22_split_kv_decode.md walks through it.
//
// Namespace fa::split. The partials: part_o [n_splits, rows_total, head_dim] and part_lse [n_splits, rows_total],
// fp32, each split's O normalised by its own sum and its LSE; the merge writes O (T: __half or __nv_bfloat16) and
// LSE [rows_total]:
//   merge_parts(n_splits)   warps per row: 1, or kWarps above kSpreadSplits splits
//   merge_row               one row by merge_parts warps
//   merge_rows_of_grid      every row, by a cooperative grid's blocks of kWarps warps after their barrier
//   combine                 the same, as a kernel of its own (two launches; the same bits)
#pragma once
#include <cuda_runtime.h>

#include <cstddef>

#include "mma_sync.cuh"  // fa::ptx::pack

namespace fa::split {
constexpr int kWarp = 32, kWarps = 4, kThreads = kWarps * kWarp;  // a merging block's warps (step 22's blocks)
constexpr int kMaxSplits = 64;                                    // two LSEs per lane
using fa::ptx::pack;

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
  merge_row<T>(part_o, part_lse, o, lse, n_splits, rows_total, head_dim, row, threadIdx.x % kWarp, warp % parts, parts,
               red);
}

}  // namespace fa::split
