// backward_tiles.cuh: the pieces of the tuned mma.sync backward that step 13 teaches and steps 14-16
// reuse unchanged, for them to include ("inline first, shared later", docs/conventions.md): step 13
// writes them out in its kernel.cu, where docs/13_backward_warp_tiles.md walks through them.
//
// Namespace fa::bwd (a step takes them in with `using namespace fa::bwd;` inside its own namespace):
//   Config<D, BLOCK_M, SPLIT_KV>   a compiled instance: 8 warps, the warp tiles of the three phases
//   acc_rows, instance_dim         dQ_accum's rows per head; the head_dim instance (64 or 128)
//   copy_tile, lse_log2, pair_at   a tile into swizzled shared memory; P's LSE; one XOR per address
//   backward_delta                 the kernel delta = rowsum(dO ∘ O), once
//   product_t, product_kv          phase 1's and phase 2's products, each a warp's 2-D tile
//   store_dkdv                     the epilogue: dK, dV through shared memory, 16-byte stores
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "cp_async.cuh"
#include "mma_sync.cuh"

namespace fa::bwd {
using namespace fa::ptx;  // step 09's ldmatrix_x4(_trans), mma_16816, pack; step 10's cp_async_16, swz

constexpr int kWarp = 32;
constexpr float kLog2e = 1.4426950408889634f;
// Rows of a head in dQ_accum: seq_q rounded up to whole query tiles of 128 (so of 64 too).
__host__ __device__ constexpr std::size_t acc_rows(int seq_q) { return std::size_t(seq_q + 127) / 128 * 128; }
// The instances' head_dim D for a problem's head_dim (padded up with zeros, step 12): 64 or 128.
constexpr int instance_dim(int head_dim) { return head_dim <= 64 ? 64 : 128; }

// A compiled instance (a step's candidates): head_dim instance D, query tile BLOCK_M, 8 warps tiled
// 2-D in each phase (step 13).
template <int D_, int BLOCK_M_, bool SPLIT_KV_>
struct Config {
  static constexpr int D = D_, WARPS = 8, THREADS = WARPS * kWarp, BLOCK_N = 128, BLOCK_M = BLOCK_M_;
  // Warp tiles: Sᵀ, dPᵀ 4 × 2; dK, dV 4 × 2; dQ the squarer of 4 × 2 and 2 × 4 (doc 13).
  static constexpr int S_KEYS = BLOCK_N / 4, S_QUERIES = BLOCK_M / 2;  // [32, 32] or [32, 64]
  // SPLIT_KV: warps 0-3 dV, 4-7 dK, 2 × 2 of [64, D/2]; else every warp both, 4 × 2 of [32, D/2].
  static constexpr bool SPLIT_KV = SPLIT_KV_;
  static constexpr int KV_WARPS = SPLIT_KV ? 2 : 4, KV_ACCS = SPLIT_KV ? 1 : 2;  // along the keys; tiles a warp owns
  static constexpr int KV_KEYS = BLOCK_N / KV_WARPS, KV_DIMS = D / 2;  // [64, 32], [64, 64], [32, 64]
  static constexpr int Q_WARPS = BLOCK_M > D ? 4 : 2;                                 // along the queries
  static constexpr int Q_QUERIES = BLOCK_M / Q_WARPS, Q_DIMS = D * Q_WARPS / WARPS;  // [32, 16] or [32, 32]
  // dK/dV: K, V [BLOCK_N, D]; Q[2], dO[2] [BLOCK_M, D]; Pᵀ, dSᵀ [BLOCK_N, BLOCK_M]; LSE[2], delta[2] [BLOCK_M] fp32.
  static constexpr std::size_t DKDV_BYTES =
      2 * (2 * BLOCK_N * D + 4 * BLOCK_M * D + 2 * BLOCK_N * BLOCK_M) + 4 * 4 * BLOCK_M;
  static_assert(D == 64 || D == 128, "head_dim instances 64 and 128");
  static_assert(BLOCK_M == 64 || BLOCK_M == 128, "query tiles of 64 or 128 (swizzled rows of >= 8 chunks)");
  static_assert(Q_DIMS % 16 == 0 && S_QUERIES % 16 == 0, "whole ldmatrix_x4 tiles in every phase");
  static_assert(2 * BLOCK_M <= THREADS, "one thread per query for the LSE and the delta of a tile");
  static_assert(DKDV_BYTES <= 227 * 1024, "an sm_90 block's shared memory");
};

__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }

// ---- device memory -> shared memory ----------------------------------------------------------------
// A [ROWS, D] tile of a head's [seq, head_dim] matrix into smem (swizzled), cp.async per 16-byte chunk
// (step 10); out-of-range rows and columns zero-filled. Issue only: the caller commits and waits.
template <int ROWS, int D, int THREADS, class T>
__device__ __forceinline__ void copy_tile(T* dst, const T* __restrict__ src, int row0, int seq, int head_dim) {
  constexpr int CHUNKS = D / 8;               // 16-byte chunks per row
  constexpr int ROW_STEP = THREADS / CHUNKS;  // 16 | 8 (4 warps), 32 | 16 (8 warps)
  static_assert(ROWS % ROW_STEP == 0 && ROW_STEP % 8 == 0, "whole passes, one swizzled column per thread");
  const int r0 = threadIdx.x / CHUNKS, c = threadIdx.x % CHUNKS;
  const bool col_in = 8 * c < head_dim;  // head_dim % 8 == 0: a chunk is wholly in or out
  // One 64-bit product per tile, then an add per row (a product per row: 13% of the kernel's instructions).
  const T* from = src + (std::size_t(row0 + r0) * head_dim + 8 * c);
  const std::size_t step = std::size_t(ROW_STEP) * head_dim;
#pragma unroll
  for (int i = 0; i < ROWS / ROW_STEP; ++i, from += step) {
    const bool in = col_in && row0 + r0 + i * ROW_STEP < seq;
    cp_async_16(dst + swz<D>(r0 + i * ROW_STEP, c), in ? from : src, in ? 16 : 0);  // src: a valid address
  }
}

// The LSE a row's P uses, times log2(e): +inf for rows past seq_q and for a row whose LSE is −inf
// (no visible key), so that P = 2^(s·sl2 − inf) = 0, never NaN (step 08's lse_for_p).
__device__ __forceinline__ float lse_log2(const float* __restrict__ lse, int row, int seq_q) {
  const float l = row < seq_q ? lse[row] : INFINITY;
  return l == -INFINITY ? INFINITY : l * kLog2e;
}

// The offset, in a swizzled tile, of chunk pair m0 + i of a lane's row from `at`, its offset at pair
// m0: one LOP3 and an immediate where swz costs about five instructions. Exact when m0 % 4 and i share
// no bits (doc 13).
__device__ __forceinline__ int pair_at(int at, int i) { return (at ^ ((i & 3) << 4)) + ((i >> 2) << 6); }

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

// ---- the three products of a query tile, each a warp's 2-D tile --------------------------------------------
// Why faster than step 12's warps of 16 keys: a warp's [m, n] tile of a product reads m + n operand
// rows from shared memory for 2·m·n·k FLOPs. Step 12's [16, 64] tiles do 12.8 FLOP per byte read,
// below the 2784/128 ≈ 22 that keeps the tensor pipe (mma.sync ceiling, per SM and clock) ahead of
// shared memory (128 bytes per clock); [32, 32] tiles do 16, [32, 64] ones 21, [64, 64] ones 32.

// Phase 1. [16·SM keys, 8·SN queries] = A·Bᵀ, A rows (keys) from X, B rows (queries) from Y, both [rows,
// D] swizzled (plain ldmatrix). o_a, o_b: the lane's offsets at its first row and chunk pair (pair_at).
template <class T, int D, int SM, int SN>
__device__ __forceinline__ void product_t(float (&acc)[SM][SN][4], const T* X, const T* Y, int o_a, int o_b) {
#pragma unroll
  for (int mt = 0; mt < SM; ++mt)
#pragma unroll
    for (int j = 0; j < SN; ++j) acc[mt][j][0] = acc[mt][j][1] = acc[mt][j][2] = acc[mt][j][3] = 0.f;
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    std::uint32_t a[SM][4];  // keys 16mt + 0..15, dims 16kk..16kk+15
#pragma unroll
    for (int mt = 0; mt < SM; ++mt) ldmatrix_x4(a[mt], X + pair_at(o_a, kk) + 16 * mt * D);
#pragma unroll
    for (int jj = 0; jj < SN / 2; ++jj) {
      std::uint32_t b[4];  // queries 16jj + 0..7 and + 8..15, dims 16kk..16kk+15
      ldmatrix_x4(b, Y + pair_at(o_b, kk) + 16 * jj * D);
#pragma unroll
      for (int mt = 0; mt < SM; ++mt) {  // one B fragment, SM mma: the reuse a 16-row warp lacked
        mma_16816<T>(acc[mt][2 * jj], a[mt], b[0], b[1]);
        mma_16816<T>(acc[mt][2 * jj + 1], a[mt], b[2], b[3]);
      }
    }
  }
}

// Phase 2. [16·VM keys, 16·VN dims] += Xᵀ·Y: A rows (keys) of Pᵀ or dSᵀ [BLOCK_N, BLOCK_M] (plain
// ldmatrix), B[query][d] = dO or Q rows [BLOCK_M, D] by ldmatrix.trans, as the forward reads V.
template <class T, int D, int BLOCK_M, int VM, int VN2>
__device__ __forceinline__ void product_kv(float (&acc)[VM][VN2][4], const T* X, const T* Y, int o_a, int o_b) {
  constexpr int VN = VN2 / 2;  // 16-dim slices, each two n-tiles of 8
#pragma unroll
  for (int kk = 0; kk < BLOCK_M / 16; ++kk) {
    std::uint32_t a[VM][4];
#pragma unroll
    for (int mt = 0; mt < VM; ++mt) ldmatrix_x4(a[mt], X + pair_at(o_a, kk) + 16 * mt * BLOCK_M);
#pragma unroll
    for (int dd = 0; dd < VN; ++dd) {
      std::uint32_t b[4];  // queries 16kk + 0..7, +8..15 × dims 16dd + 0..7, then the same × +8..15
      ldmatrix_x4_trans(b, Y + pair_at(o_b, dd) + 16 * kk * D);
#pragma unroll
      for (int mt = 0; mt < VM; ++mt) {
        mma_16816<T>(acc[mt][2 * dd], a[mt], b[0], b[1]);
        mma_16816<T>(acc[mt][2 * dd + 1], a[mt], b[2], b[3]);
      }
    }
  }
}

// The epilogue: dK = scale·dK_acc into the K tile, dV into the V tile, then 16-byte stores of whole
// rows (step 11's); a block no query sees stores zeros. acc: [KV_ACCS][VM][2·VN][4].
template <class T, class C, class Acc>
__device__ __forceinline__ void store_dkdv(const Acc& acc, T* Ks, T* Vs, T* __restrict__ dk, T* __restrict__ dv,
                                           int n0, int seq_k, int head_dim, float scale) {
  constexpr int D = C::D, VM = C::KV_KEYS / 16, VN = C::KV_DIMS / 16;
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp, g = lane / 4, t4 = lane % 4;
  const bool dk_warp = C::SPLIT_KV && warp >= 4;
  const int vk0 = warp % C::KV_WARPS * C::KV_KEYS, vd0 = (C::SPLIT_KV ? warp / 2 % 2 : warp / 4) * C::KV_DIMS;
#pragma unroll
  for (int mt = 0; mt < VM; ++mt)
#pragma unroll
    for (int j = 0; j < 2 * VN; ++j)
#pragma unroll
      for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int a = 0; a < C::KV_ACCS; ++a) {
          const bool is_dk = C::SPLIT_KV ? dk_warp : a == 1;
          const float f = is_dk ? scale : 1.f;
          const int r = vk0 + 16 * mt + g + 8 * h, c = vd0 / 8 + j;
          *reinterpret_cast<std::uint32_t*>((is_dk ? Ks : Vs) + swz<D>(r, c) + 2 * t4) =
              pack<T>(f * acc[a][mt][j][2 * h], f * acc[a][mt][j][2 * h + 1]);
        }
  __syncthreads();  // the whole block's rows are in
  constexpr int CHUNKS = D / 8;
#pragma unroll
  for (int i = threadIdx.x; i < C::BLOCK_N * CHUNKS; i += C::THREADS) {
    const int r = i / CHUNKS, c = i % CHUNKS;
    if (n0 + r < seq_k && 8 * c < head_dim) {
      const std::size_t at = std::size_t(n0 + r) * head_dim + 8 * c;
      *reinterpret_cast<uint4*>(dk + at) = *reinterpret_cast<const uint4*>(Ks + swz<D>(r, c));
      *reinterpret_cast<uint4*>(dv + at) = *reinterpret_cast<const uint4*>(Vs + swz<D>(r, c));
    }
  }
}

}  // namespace fa::bwd
