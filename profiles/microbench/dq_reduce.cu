// dq_reduce: how fast the H100's L2 absorbs a backward's dQ additions, by each way of adding them.
//
// A backward block (a key tile) adds a [64 queries, D] fp32 partial of dQ into the workspace for every
// query tile it visits; every key tile of a head adds into the same [seq_q, D] accumulator. This program
// does only that, with no products: a grid of (seq/128 key tiles, heads) blocks of two warpgroups, each
// walking the seq/64 query tiles and adding a tile of ones, in four ways:
//
//   rows8    atomicAdd(float2*) by rows: a wgmma accumulator's two neighbouring columns, rows g and g + 8
//            (step 20): one warp instruction covers 8 rows, 8 cache lines for 256 bytes
//   frag16   atomicAdd(float4*) in the accumulator's fragment order (step 14's idea on the wgmma layout):
//            one warp instruction covers 512 consecutive bytes, 4 whole lines
//   bulk     the fragments into shared memory (fragment order), then one cp.reduce.async.bulk .add.f32 of
//            the warpgroup's 16 KB per tile by one thread (FlashAttention-3's dQ path), staging double-buffered
//   store16  plain float4 stores in fragment order, no addition: the L2's write rate, for scale
//
// each with the query tiles in the same order for every key tile or staggered (key tile b starts at
// tile b mod T). Every element must end at (launches × key tiles): checked after each, every element.
//
//   build/bin/dq_reduce [--heads H] [--seq S] [--dim 64|128] [--reps N] > dq_reduce.csv
//
// Output: CSV, one row per (method, order): bytes added per launch, median ms, TB/s, check.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "hopper.cuh"

namespace {
using namespace fa::ptx;  // fence_proxy_async, named_barrier_sync (steps 17-19)

enum Method { kRows8, kFrag16, kBulk, kStore16 };
const char* const kNames[] = {"rows8", "frag16", "bulk", "store16"};

// cp.reduce.async.bulk: `bytes` (a multiple of 16) of fp32 at src (shared, 16-byte aligned) added
// element-wise into dst (global, 16-byte aligned) by the bulk copy engine; completion in a bulk group.
__device__ __forceinline__ void bulk_reduce_add_f32(float* dst, std::uint32_t src, std::uint32_t bytes) {
  asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\n" ::"l"(dst), "r"(src),
               "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void bulk_wait_read() {  // the sources of all but the last N groups may be reused
  asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(N) : "memory");
}
__device__ __forceinline__ void bulk_wait_all() { asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory"); }

// grid (key tiles, heads), 256 threads: warpgroup w adds dims [64w, 64w + 64) at D = 128, or, at D = 64, both
// warpgroups add all 64 dims (step 20's key split: each adds its own half of the key sum). acc: [heads][T][64][D],
// one tile of 64 rows after another; rows8 addresses it row-major, the others in fragment order within a
// warpgroup's [64, 64] part (float4 slot ((c8·4 + warp)·32 + lane) of the part, c8 the 8-column group).
template <Method M, int D>
__global__ void __launch_bounds__(256, 1) add_tiles(float* __restrict__ acc, int tiles, bool stagger) {
  extern __shared__ float4 stage[];  // bulk: [2 buffers][2 warpgroups][64·64 floats]
  const int wg = threadIdx.x / 128, warp = threadIdx.x % 128 / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, q4 = lane % 4, part = D == 128 ? wg : 0;
  float* head = acc + std::size_t(blockIdx.y) * tiles * 64 * D;
  const int t0 = stagger ? int(blockIdx.x % unsigned(tiles)) : 0;
  const float one = 1.f;
  for (int it = 0, t = t0; it < tiles; ++it, t = t + 1 == tiles ? 0 : t + 1) {
    float* tile = head + std::size_t(t) * 64 * D;
    if constexpr (M == kRows8) {
#pragma unroll
      for (int j = 0; j < 8; ++j)  // 8-column groups of this warpgroup's 64 dims; rows g and g + 8
#pragma unroll
        for (int h = 0; h < 2; ++h)
          atomicAdd(reinterpret_cast<float2*>(tile + (16 * warp + g + 8 * h) * D + 64 * part + 8 * j + 2 * q4),
                    make_float2(one, one));
    } else if constexpr (M == kFrag16 || M == kStore16) {
      float4* frag = reinterpret_cast<float4*>(tile + part * 64 * 64);
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        float4* at = frag + (j * 4 + warp) * 32 + lane;
        if constexpr (M == kFrag16)
          atomicAdd(at, make_float4(one, one, one, one));
        else
          *at = make_float4(one, one, one, one);
      }
    } else {  // kBulk
      float4* buf = stage + ((it & 1) * 2 + wg) * 64 * 64 / 4;
      if (threadIdx.x % 128 == 0) bulk_wait_read<1>();  // the buffer written two tiles ago has been read
      named_barrier_sync(1 + wg, 128);
#pragma unroll
      for (int j = 0; j < 8; ++j) buf[(j * 4 + warp) * 32 + lane] = make_float4(one, one, one, one);
      fence_proxy_async();  // these generic writes before the bulk copy engine (async proxy) reads them
      named_barrier_sync(1 + wg, 128);
      if (threadIdx.x % 128 == 0) {
        bulk_reduce_add_f32(tile + part * 64 * 64, smem_addr(buf), 64 * 64 * 4);
        bulk_commit();
      }
    }
  }
  if constexpr (M == kBulk)
    if (threadIdx.x % 128 == 0) bulk_wait_all();
}

int arg(int argc, char** argv, const char* name, int fallback) {
  for (int i = 1; i + 1 < argc; ++i)
    if (!std::strcmp(argv[i], name)) {
      char* end = nullptr;
      const long v = std::strtol(argv[i + 1], &end, 10);
      if (*end || v <= 0 || v > (1 << 24)) {
        std::fprintf(stderr, "dq_reduce: %s takes a positive integer, got '%s'\n", name, argv[i + 1]);
        std::exit(2);
      }
      return int(v);
    }
  return fallback;
}

#define CHECK(x)                                                                                  \
  do {                                                                                            \
    cudaError_t e_ = (x);                                                                         \
    if (e_ != cudaSuccess) {                                                                      \
      std::fprintf(stderr, "dq_reduce: %s: %s (%s:%d)\n", #x, cudaGetErrorString(e_), __FILE__, __LINE__); \
      std::exit(1);                                                                               \
    }                                                                                             \
  } while (0)

template <Method M, int D>
void measure(float* acc, std::size_t elems, int heads, int seq, int reps, bool stagger, std::vector<float>& host) {
  const int key_tiles = seq / 128, tiles = seq / 64;
  const int smem = M == kBulk ? 2 * 2 * 64 * 64 * 4 : 0;
  if (smem) CHECK(cudaFuncSetAttribute(add_tiles<M, D>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  CHECK(cudaMemset(acc, 0, elems * 4));
  const dim3 grid(key_tiles, heads);
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  std::vector<float> ms;
  add_tiles<M, D><<<grid, 256, smem>>>(acc, tiles, stagger);  // warm-up
  CHECK(cudaGetLastError());
  for (int r = 0; r < reps; ++r) {
    CHECK(cudaEventRecord(a));
    add_tiles<M, D><<<grid, 256, smem>>>(acc, tiles, stagger);
    CHECK(cudaEventRecord(b));
    CHECK(cudaEventSynchronize(b));
    float t = 0;
    CHECK(cudaEventElapsedTime(&t, a, b));
    ms.push_back(t);
  }
  CHECK(cudaGetLastError());
  // Every element: (reps + 1) launches, each adding 1 from every key tile (twice at D = 64: both warpgroups);
  // store16: 1.
  CHECK(cudaMemcpy(host.data(), acc, elems * 4, cudaMemcpyDeviceToHost));
  const float want = float((reps + 1) * key_tiles * (D == 64 ? 2 : 1));
  std::size_t bad = 0;
  for (std::size_t i = 0; i < elems; ++i) bad += host[i] != (M == kStore16 ? 1.f : want);
  std::sort(ms.begin(), ms.end());
  const double med = ms[ms.size() / 2];
  const double bytes = double(key_tiles) * heads * tiles * 64 * 64 * 4 * 2;  // two warpgroups' [64, 64] each
  std::printf("%s,%s,%d,%d,%d,%.0f,%.4f,%.3f,%s\n", kNames[M], stagger ? "staggered" : "same", D, heads, seq, bytes,
              med, bytes / (med * 1e-3) / 1e12, bad ? "FAIL" : "PASS");
  if (bad) std::fprintf(stderr, "dq_reduce: %s: %zu of %zu elements wrong\n", kNames[M], bad, elems);
  CHECK(cudaEventDestroy(a));
  CHECK(cudaEventDestroy(b));
}

template <int D>
int run(int heads, int seq, int reps) {
  const std::size_t elems = std::size_t(heads) * seq * D;
  float* acc = nullptr;
  CHECK(cudaMalloc(&acc, elems * 4));
  std::vector<float> host(elems);
  for (bool stagger : {false, true}) {
    measure<kRows8, D>(acc, elems, heads, seq, reps, stagger, host);
    measure<kFrag16, D>(acc, elems, heads, seq, reps, stagger, host);
    measure<kBulk, D>(acc, elems, heads, seq, reps, stagger, host);
    measure<kStore16, D>(acc, elems, heads, seq, reps, stagger, host);
  }
  CHECK(cudaFree(acc));
  return 0;
}
}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i)
    if (!std::strcmp(argv[i], "--help")) {
      std::printf("usage: dq_reduce [--heads H] [--seq S (a multiple of 128)] [--dim 64|128] [--reps N]\n");
      return 0;
    }
  const int heads = arg(argc, argv, "--heads", 16), seq = arg(argc, argv, "--seq", 16384);
  const int dim = arg(argc, argv, "--dim", 128), reps = arg(argc, argv, "--reps", 5);
  if (seq % 128 || (dim != 64 && dim != 128)) {
    std::fprintf(stderr, "dq_reduce: --seq must be a multiple of 128 and --dim 64 or 128\n");
    return 2;
  }
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    std::fprintf(stderr, "dq_reduce: no CUDA device\n");
    return 4;
  }
  cudaDeviceProp p{};
  CHECK(cudaGetDeviceProperties(&p, 0));
  if (p.major != 9) {
    std::fprintf(stderr, "dq_reduce: needs compute capability 9.0 (cp.reduce.async.bulk, sm_90a), found %d.%d\n",
                 p.major, p.minor);
    return 4;
  }
  std::printf("method,order,dim,heads,seq,bytes_added,time_ms,tb_per_s,check\n");
  return dim == 128 ? run<128>(heads, seq, reps) : run<64>(heads, seq, reps);
}
