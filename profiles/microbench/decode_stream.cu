// decode_stream: how fast the decode steps' blocks can stream their K/V chunks when they do none of the
// attention's math. Step 22 launches about one block per SM at batch 1 and at one K/V head, and each block
// streams its chunk of keys through a ring of shared-memory tiles (cp.async, 64 keys of K and of V per
// stage, 128 threads, each copying 16-byte pieces of 8 rows). On those shapes it reads well below the copy's
// rate, and below read_floor.cu's kernel, which only reads the same bytes (doc 22). Two causes are possible,
// and they need different cures:
//   - the copies: one block's ring keeps too few bytes in flight, or too few streams read at once (then a
//     deeper ring, more splits or whole-tile TMA copies would help);
//   - the math between the copies: with one warp per scheduler, the latency of each tile's dependent
//     instructions is not hidden, and a block issues its next copy only after it (then more warps per SM
//     would help, not a deeper ring).
// This program copies exactly as the step does (same grid, same chunks, same ring, same pieces per thread)
// and replaces the math by a chosen amount of dependent work per tile: --spin N is a chain of N dependent
// FMAs per thread per tile (0: only the reading of the tile from shared memory into a checksum). If spin 0
// runs near the read-only kernel and a spin of the math's latency slows it to the step's time, the math
// is the limit; if spin 0 is already as slow as the step, the copies are. Then --copy tma says whether
// whole tiles by TMA (four boxes per tile from one thread, steps 17 on) stream faster than the 2048
// cp.async a tile takes from 128 threads, before a step is built on them.
//
// A geometry is STREAMS:KEYS:SPLITS:HALVES: STREAMS independent (sequence, K/V head) caches of KEYS keys
// (d 128, fp16, K and V each [STREAMS, KEYS, 128]), each cut into SPLITS chunks (rounded up to whole
// tiles, as step 22 cuts them), and HALVES blocks per chunk that read the same keys (step 22's two
// 16-row blocks of a 32-row group). Grid (SPLITS, STREAMS, HALVES), one block each. The default list
// mirrors the blocks step 22's rule launches on the decode sweep's few-block shapes (batch 1, 8 and 64 at
// one K/V head, batch 1 at 8) and the alternatives its appendices measure. Timed as the steps are
// (harness/timer.h: L2 flushed before each launch, CUDA events, median of --reps). Every launch's sum of
// the words it read is checked against the host's, so a launch that skipped or repeated a piece fails.
//
//   build/bin/decode_stream [--geometry LIST] [--copy cp.async|tma] [--stages 2,3,4] [--spin 0,256,512,1024]
//                           [--reps N] > decode_stream.csv
//
// Output: CSV, one row per (geometry, copy, ring depth, spin): the geometry, blocks, unique K/V MB, median µs,
// GB/s (unique K/V bytes over the time), % of the device-to-device copy's rate measured in the same run, check.
// Exit status: 0 every check passed, 1 a check failed, 2 bad usage (or a GPU other than compute capability
// 9.x: the TMA kernels are built for sm_90a), 3 no CUDA device.
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "attention_inputs.h"
#include "check.h"
#include "cli.h"
#include "cp_async.cuh"
#include "device_info.h"
#include "hashed_buffer.cuh"
#include "hopper.cuh"
#include "tensor_map.h"
#include "timer.h"

namespace {

using namespace fa::ptx;

constexpr int kThreads = 128, kBlockN = 64, kD = 128;  // step 22's block, tile of keys, head_dim
constexpr int kChunks = kD / 8;                        // 16-byte pieces per row: 16
constexpr int kRowStep = kThreads / kChunks;           // rows between a thread's pieces: 8
constexpr int kVecs = kBlockN / kRowStep;              // pieces per thread per tile, of K and of V: 8
constexpr int kTileWords = kBlockN * kD / 8;           // 16-byte words in a tile of K (or of V): 1024

// Word i of K is word(i), of V word(i + K's words) (hashed_buffer.cuh, as read_floor.cu's buffer).
using fa::microbench::add4;
using fa::microbench::fill;
using fa::microbench::word;

// One block per (split, stream, half): keys [k_begin, k_end) of stream blockIdx.y, cut as step 22 cuts them,
// tile by tile through a ring of STAGES stages of 64 keys of K and V (32 KB). The copy of tile t + STAGES − 1
// is issued before tile t is consumed (STAGES − 1 tiles in flight, as in step 22's loop). Consuming a tile:
// each thread adds 16 of its 16-byte words (word i·128 + thread: conflict-free) into a checksum, skipping rows
// past the chunk, then runs `spin` dependent FMAs (the stand-in for the math); a barrier frees the stage.
//   TMA false: step 22's copies, 128 threads each issuing 8 cp.async of 16 bytes per tile of K and of V (rows
//              r0 + 8i, column c), rows past the chunk zero-filled. A stage: K [64 rows][16 words], then V.
//   TMA true:  thread 0 issues the tile as four boxes of [64 rows, 64 columns] (K's and V's two halves of
//              head_dim) with the 128-byte swizzle, counted on the stage's mbarrier; every thread waits on it.
//              A stage: K columns 0-63, K 64-127, V 0-63, V 64-127, each [64 rows][8 words]; rows past the
//              chunk are read too (the next split's keys, zeros past the cache) and skipped by the sum.
template <int STAGES, bool TMA>
__global__ void __launch_bounds__(kThreads)
    stream_chunks(const __grid_constant__ CUtensorMap km, const __grid_constant__ CUtensorMap vm,
                  const uint4* __restrict__ k, const uint4* __restrict__ v, int keys, int spin,
                  unsigned long long* sum) {
  extern __shared__ uint4 raw[];
  // 1024-byte aligned for the 128-byte swizzle (the launch allocates 1 KB more than the ring)
  uint4* ring = reinterpret_cast<uint4*>((reinterpret_cast<std::uintptr_t>(raw) + 1023) & ~std::uintptr_t(1023));
  __shared__ std::uint64_t full[STAGES];  // TMA: stage s's phase completes when its 32 KB have landed
  const int chunk = ((keys + gridDim.x - 1) / gridDim.x + kBlockN - 1) / kBlockN * kBlockN;
  const int k_begin = blockIdx.x * chunk, k_end = min(keys, k_begin + chunk);
  const int n_tiles = k_end > k_begin ? (k_end - k_begin + kBlockN - 1) / kBlockN : 0;
  const int r0 = threadIdx.x / kChunks, c = threadIdx.x % kChunks;
  const std::size_t base = (std::size_t(blockIdx.y) * keys + k_begin + r0) * kChunks + c;  // this thread's first piece
  if (TMA && threadIdx.x == 0) {
    for (int s = 0; s < STAGES; ++s) mbarrier_init(&full[s], 1);
    fence_barrier_init();
  }
  __syncthreads();
  auto issue = [&](int t) {
    if constexpr (TMA) {
      if (threadIdx.x == 0 && t < n_tiles) {
        uint4* st = ring + (t % STAGES) * 2 * kTileWords;
        std::uint64_t* bar = &full[t % STAGES];
        const int row = k_begin + t * kBlockN, y = blockIdx.y;
        mbarrier_arrive_expect_tx(bar, 2 * kTileWords * sizeof(uint4));
        tma_load_3d(st, &km, bar, 0, row, y);
        tma_load_3d(st + kTileWords / 2, &km, bar, 64, row, y);
        tma_load_3d(st + kTileWords, &vm, bar, 0, row, y);
        tma_load_3d(st + 3 * kTileWords / 2, &vm, bar, 64, row, y);
      }
    } else {
      if (t < n_tiles) {
        uint4* dst = ring + (t % STAGES) * 2 * kTileWords + r0 * kChunks + c;
#pragma unroll
        for (int i = 0; i < kVecs; ++i) {
          const int row = k_begin + t * kBlockN + r0 + i * kRowStep;
          const std::size_t at = base + (std::size_t(t) * kBlockN + i * kRowStep) * kChunks;
          const int bytes = row < k_end ? 16 : 0;  // rows past the chunk: zeros
          cp_async_16(dst + i * kRowStep * kChunks, k + (bytes ? at : 0), bytes);
          cp_async_16(dst + kTileWords + i * kRowStep * kChunks, v + (bytes ? at : 0), bytes);
        }
      }
      cp_async_commit();  // an empty group past the last tile keeps the wait's count uniform
    }
  };
  for (int t = 0; t < STAGES - 1; ++t) issue(t);
  std::uint64_t acc = 0;
  float x = float(threadIdx.x);
  for (int t = 0; t < n_tiles; ++t) {
    issue(t + STAGES - 1);  // into the stage tile t − 1 used, freed by the barrier that ended its turn
    if constexpr (TMA) {
      mbarrier_wait(&full[t % STAGES], (t / STAGES) & 1);  // tile t's 32 KB have landed
    } else {
      cp_async_wait<STAGES - 1>();  // tile t's group has landed (this thread's pieces) ...
      __syncthreads();              // ... and every thread's
    }
    const uint4* tile = ring + (t % STAGES) * 2 * kTileWords;
#pragma unroll
    for (int i = 0; i < 2 * kVecs; ++i) {  // 16 words each, 2048 in all: the tile's K and V
      const int w = i * kThreads + threadIdx.x;
      const int row = TMA ? w % (kTileWords / 2) / 8 : w % kTileWords / kChunks;  // the word's key in the tile
      if (k_begin + t * kBlockN + row < k_end) acc += add4(tile[w]);
    }
    for (int s = 0; s < spin; ++s) x = fmaf(x, 0.999f, 1.0f);  // dependent: each waits for the one before
    __syncthreads();  // the stage is free for the copy issued STAGES − 1 tiles later
  }
  if constexpr (!TMA) cp_async_wait<0>();
  if (x == -1.0f) acc += 1;  // never true (x stays positive), but the compiler cannot drop the chain
  for (int o = 16; o > 0; o /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, o);
  if (threadIdx.x % 32 == 0 && acc) atomicAdd(sum, static_cast<unsigned long long>(acc));
}

struct Geometry {
  int streams, keys, splits, halves;
  std::string label;  // the decode shape it mirrors
};

// Step 22's grids on the sweep's few-block shapes (its rule at 132 SMs, 32 query heads, d 128), the
// alternatives its appendices and history measured, and the launch alone.
const std::vector<Geometry> kDefaults = {
    // one tile for one block: the launch and its ring's shared memory, after the flush's memset (which runs with
    // none, so the SM's split between L1 and shared memory may have to change first), against read_floor's
    // launch alone
    {1, 64, 1, 1, "one block, one tile (the launch)"},
    {1, 131072, 64, 2, "B1 KV1 131072 (rule: 64 splits, 16-row halves)"},
    {1, 131072, 128, 2, "B1 KV1 131072 (128 splits, halves)"},
    {1, 131072, 128, 1, "B1 KV1 131072 (128 splits, one block each)"},
    {1, 131072, 264, 1, "B1 KV1 131072 (264 splits: two blocks per SM)"},
    {1, 65536, 64, 2, "B1 KV1 65536 (rule)"},
    {1, 16384, 64, 2, "B1 KV1 16384 (rule)"},
    {8, 16384, 16, 1, "B8 KV1 and B1 KV8 16384 (rule: 16 splits, one block each)"},
    {64, 1024, 2, 1, "B64 KV1 1024 (rule: 2 splits of 32 rows)"},
    {64, 1024, 1, 1, "B64 KV1 1024 (1 split)"},
    {64, 1024, 1, 2, "B64 KV1 1024 (1 split, 16-row halves)"},
    {64, 1024, 2, 2, "B64 KV1 1024 (2 splits, 16-row halves)"},
    {64, 4096, 2, 1, "B64 KV1 4096 (rule)"},
    {64, 4096, 1, 2, "B64 KV1 4096 (1 split, 16-row halves)"},
    {64, 4096, 2, 2, "B64 KV1 4096 (2 splits, 16-row halves)"},
};

std::vector<Geometry> parse_geometries(const std::string& text) {
  std::vector<Geometry> out;
  std::size_t at = 0;
  while (at <= text.size()) {
    const std::size_t end = std::min(text.find(',', at), text.size());
    const std::string item = text.substr(at, end - at);
    std::vector<int> f;
    std::string rest = item;
    for (char& ch : rest) ch = ch == ':' ? ',' : ch;
    try {
      f = fa::attention::parse_seq_lens(rest);
    } catch (const fa::UsageError&) {
      f.clear();
    }
    if (f.size() != 4 || f[0] < 1 || f[1] < 1 || f[2] < 1 || f[3] < 1 || f[0] > 4096 || f[2] > 1024 || f[3] > 8 ||
        std::uint64_t(f[0]) * f[1] * kD * 2 > (1ull << 32))
      throw fa::UsageError("--geometry: '" + item + "' is not STREAMS:KEYS:SPLITS:HALVES (each at least 1; streams " +
                           "at most 4096, splits 1024, halves 8; K at most 4 GiB)");
    out.push_back({f[0], f[1], f[2], f[3], item});
    at = end + 1;
  }
  return out;
}

std::vector<int> parse_list(const std::string& flag, const std::string& text, int lo, int hi) {
  std::vector<int> out;
  try {
    out = fa::attention::parse_seq_lens(text);
  } catch (const fa::UsageError&) {
    out.clear();
  }
  if (out.empty()) throw fa::UsageError(flag + ": '" + text + "' is not a comma-separated list of whole numbers");
  for (int n : out)
    if (n < lo || n > hi)
      throw fa::UsageError(flag + ": " + std::to_string(n) + " is outside " + std::to_string(lo) + "-" + std::to_string(hi));
  return out;
}

using Kernel = void (*)(CUtensorMap, CUtensorMap, const uint4*, const uint4*, int, int, unsigned long long*);
template <bool TMA>
Kernel kernel_of(int stages) {
  return stages == 2 ? stream_chunks<2, TMA> : stages == 3 ? stream_chunks<3, TMA>
                     : stages == 4 ? stream_chunks<4, TMA> : stream_chunks<5, TMA>;
}
Kernel kernel_of(int stages, bool tma) { return tma ? kernel_of<true>(stages) : kernel_of<false>(stages); }
int smem_of(int stages) { return stages * 2 * kTileWords * int(sizeof(uint4)) + 1024; }  // + the alignment's slack

}  // namespace

int main(int argc, char** argv) try {
  long long reps = 20;
  std::string geometry, stages_text = "2,3,4", spin_text = "0,256,512,1024", copy_text = "cp.async,tma";
  fa::ArgParser p("decode_stream",
                  "step 22's K/V copies (grid, chunks, ring of 64-key tiles) without its math, by cp.async as the "
                  "step copies or by TMA boxes: per geometry, copy, ring depth and dependent work per tile, the time "
                  "and GB/s; CSV on stdout");
  p.add_string("--geometry", &geometry,
               "comma-separated STREAMS:KEYS:SPLITS:HALVES (default: step 22's grids on the few-block decode shapes)");
  p.add_string("--copy", &copy_text, "cp.async (the step's), tma (whole tiles by one thread), or both (default)",
               {"cp.async", "tma", "cp.async,tma"});
  p.add_string("--stages", &stages_text, "ring depths, comma-separated, each 2-5 (default 2,3,4; step 22 uses 3)");
  p.add_string("--spin", &spin_text, "dependent FMAs per thread per tile, comma-separated, 0-65536 (default 0,256,512,1024)");
  p.add_int("--reps", &reps, 1, 1 << 20, "timed repetitions per row (median reported; at least 20)");
  if (!p.parse(argc, argv)) return fa::kExitOk;
  if (reps < 20) throw fa::UsageError("--reps: at least 20 (docs/conventions.md, \"Measurement\")");
  const std::vector<Geometry> geoms = p.given("--geometry") ? parse_geometries(geometry) : kDefaults;
  const std::vector<int> stages = parse_list("--stages", stages_text, 2, 5);
  const std::vector<int> spins = parse_list("--spin", spin_text, 0, 65536);
  std::vector<bool> copies;
  if (copy_text != "tma") copies.push_back(false);
  if (copy_text != "cp.async") copies.push_back(true);
  std::string why;
  if (!fa::cuda_device_available(&why)) {
    std::fprintf(stderr, "decode_stream: no CUDA device: %s\n", why.c_str());
    return fa::kExitNoDevice;
  }
  const fa::DeviceInfo dev = fa::query_device(0, /*measure_copy=*/true);
  if (dev.cc_major != 9) throw fa::UsageError("built for sm_90a (TMA): needs an H100-class GPU, found " + dev.name);
  for (int s : {2, 3, 4, 5})
    for (bool tma : {false, true}) {  // as the step's kernels are set up (fa::opt_in_shared_memory)
      FA_CUDA_CHECK(cudaFuncSetAttribute(kernel_of(s, tma), cudaFuncAttributeMaxDynamicSharedMemorySize, smem_of(s)));
      FA_CUDA_CHECK(cudaFuncSetAttribute(kernel_of(s, tma), cudaFuncAttributePreferredSharedMemoryCarveout,
                                         int(cudaSharedmemCarveoutMaxShared)));
    }
  unsigned long long* sum = nullptr;
  FA_CUDA_CHECK(cudaMalloc(&sum, sizeof *sum));
  fa::TimingOptions opt;
  opt.reps = int(reps);
  const int launches = opt.warmup + opt.reps;
  std::printf("geometry,streams,keys,splits,halves,blocks,copy,stages,spin,mb,median_us,gbs,pct_copy,copy_gbs,check\n");
  bool ok = true;
  for (const Geometry& g : geoms) {
    const std::uint64_t words = std::uint64_t(g.streams) * g.keys * kD / 2;  // 32-bit words of K (and of V)
    std::uint32_t *k = nullptr, *v = nullptr;
    FA_CUDA_CHECK(cudaMalloc(&k, words * 4));
    FA_CUDA_CHECK(cudaMalloc(&v, words * 4));
    fill<<<dev.sm_count * 8, 256>>>(k, words, 0);
    fill<<<dev.sm_count * 8, 256>>>(v, words, words);
    FA_CHECK_LAUNCH();
    // K and V as [streams, keys, 128] fp16, boxes of [64 keys, 64 columns] (the 128-byte swizzle's widest)
    const CUtensorMap km = fa::tensor_map_16bit_3d(k, fa::DType::F16, g.streams, g.keys, kD, kBlockN, 64,
                                                   "decode_stream", "K");
    const CUtensorMap vm = fa::tensor_map_16bit_3d(v, fa::DType::F16, g.streams, g.keys, kD, kBlockN, 64,
                                                   "decode_stream", "V");
    std::uint64_t expect = 0;  // every word of K and V, read by each of the halves
    for (std::uint64_t i = 0; i < 2 * words; ++i) expect += word(i);
    expect *= std::uint64_t(g.halves);
    const dim3 grid(g.splits, g.streams, g.halves);
    for (bool tma : copies)
      for (int st : stages)
        for (int spin : spins) {
          FA_CUDA_CHECK(cudaMemset(sum, 0, sizeof *sum));
          const Kernel kern = kernel_of(st, tma);
          const fa::Timing t = fa::time_launches(
              [&](cudaStream_t s) {
                kern<<<grid, kThreads, smem_of(st), s>>>(km, vm, reinterpret_cast<const uint4*>(k),
                                                         reinterpret_cast<const uint4*>(v), g.keys, spin, sum);
              },
              opt);
          FA_CHECK_LAUNCH();
          unsigned long long got = 0;
          FA_CUDA_CHECK(cudaMemcpy(&got, sum, sizeof got, cudaMemcpyDeviceToHost));
          const bool pass = got == static_cast<unsigned long long>(expect * std::uint64_t(launches));
          ok = ok && pass;
          const double bytes = 2.0 * words * 4, us = t.median_ms * 1e3, gbs = us > 0 ? bytes / (us * 1e3) : 0;
          std::printf("\"%s\",%d,%d,%d,%d,%d,%s,%d,%d,%.3f,%.2f,%.1f,%.1f,%.1f,%s\n", g.label.c_str(), g.streams,
                      g.keys, g.splits, g.halves, g.splits * g.streams * g.halves, tma ? "tma" : "cp.async", st, spin,
                      bytes / 1e6, us, gbs, dev.copy_gbs > 0 ? 100 * gbs / dev.copy_gbs : 0.0, dev.copy_gbs,
                      pass ? "ok" : "FAIL");
          std::fflush(stdout);
        }
    FA_CUDA_CHECK(cudaFree(k));
    FA_CUDA_CHECK(cudaFree(v));
  }
  FA_CUDA_CHECK(cudaFree(sum));
  if (!ok) std::fprintf(stderr, "decode_stream: FAIL: a launch's sum differs from the host's\n");
  return ok ? fa::kExitOk : fa::kExitCheckFailed;
} catch (const fa::UsageError& e) {
  std::fprintf(stderr, "decode_stream: %s\n", e.what());
  return fa::kExitUsage;
} catch (const fa::Error& e) {
  std::fprintf(stderr, "decode_stream: %s\n", e.what());
  return fa::kExitCheckFailed;
}
