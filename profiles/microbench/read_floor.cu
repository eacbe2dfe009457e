// read_floor: how fast one kernel launch can read a buffer of a given size from device memory, the
// ceiling a decode step is held to. A decode call reads its K/V cache once and writes a few rows, so its
// time can be no shorter than that of a kernel that does only the reading. The decode targets measure a
// step against the device-to-device copy's bandwidth, a large-buffer rate; at tens of MB a launch's
// start, its ramp-up and its drain are a share of the time too. This program measures that share.
//
// For each size, 2^19 bytes up to --max-mb MiB in powers of two (the decode sweep's K/V sizes: 2·batch·K/V
// heads·keys·128·2 bytes), one kernel reads every 16-byte word once (grid-stride, several loads in flight per
// thread, streaming: ld.global.cs) and adds the 32-bit words into a 64-bit sum, for a few grid sizes
// (1, 2, 4 and 8 blocks of 256 threads per SM) and loads in flight per thread (4, 8 and 16). Timed as the steps are (harness/timer.h: CUDA events around
// each launch, L2 flushed before each, median of --reps); bytes 0 is the launch alone. The buffer holds a
// hash of each word's index, and every launch's sum is checked against the host's (mod 2^64), so a
// kernel that skipped a word would fail.
//
//   build/bin/read_floor [--max-mb N] [--reps N] > read_floor.csv
//
// Output: CSV, one row per (size, blocks per SM, loads in flight): bytes, median µs, GB/s (bytes read over the time), % of
// the device-to-device copy's rate measured in the same run (bytes read + written), and the check.
// Exit status: 0 every check passed, 1 a check failed, 2 bad usage, 3 no CUDA device.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "check.h"
#include "cli.h"
#include "device_info.h"
#include "hashed_buffer.cuh"
#include "timer.h"

namespace {

constexpr int kThreads = 256;

using fa::microbench::add4;
using fa::microbench::fill;
using fa::microbench::word;

// Every 16-byte word of p[0, n16) read once, kUnroll loads issued before any is used; the words' sum
// added into *sum (one atomic per warp).
template <int kUnroll>
__global__ void __launch_bounds__(kThreads) read_all(const uint4* __restrict__ p, std::uint64_t n16,
                                                     unsigned long long* sum) {
  const std::uint64_t stride = std::uint64_t(gridDim.x) * kThreads;
  std::uint64_t i = blockIdx.x * std::uint64_t(kThreads) + threadIdx.x, acc = 0;
  for (; i + (kUnroll - 1) * stride < n16; i += kUnroll * stride) {
    uint4 v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) v[u] = __ldcs(p + i + u * stride);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) acc += add4(v[u]);
  }
  for (; i < n16; i += stride) acc += add4(__ldcs(p + i));
  for (int o = 16; o > 0; o /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, o);
  if (threadIdx.x % 32 == 0 && acc) atomicAdd(sum, static_cast<unsigned long long>(acc));
}

}  // namespace

int main(int argc, char** argv) try {
  long long max_mb = 4096, reps = 20;
  fa::ArgParser p("read_floor",
                  "one kernel reading a buffer of 2^19 bytes up to --max-mb MiB in powers of two, at 1, 2, 4 and 8 "
                  "blocks per SM, 4, 8 and 16 loads in flight per thread; CSV on stdout: bytes, median µs, GB/s, % of "
                  "the copy's rate, check");
  p.add_int("--max-mb", &max_mb, 1, 1 << 16, "the largest buffer, MiB (default 4096: 2^32 bytes)");
  p.add_int("--reps", &reps, 1, 1 << 20, "timed repetitions per size and grid (median reported; at least 20)");
  if (!p.parse(argc, argv)) return fa::kExitOk;
  if (reps < 20) throw fa::UsageError("--reps: at least 20 (docs/conventions.md, \"Measurement\")");
  std::string why;
  if (!fa::cuda_device_available(&why)) {
    std::fprintf(stderr, "read_floor: no CUDA device: %s\n", why.c_str());
    return fa::kExitNoDevice;
  }
  const fa::DeviceInfo dev = fa::query_device(0, /*measure_copy=*/true);
  std::uint64_t top = 1ull << 19;
  while (top * 2 <= std::uint64_t(max_mb) * (1ull << 20)) top *= 2;
  std::uint32_t* buf = nullptr;
  unsigned long long* sum = nullptr;
  FA_CUDA_CHECK(cudaMalloc(&buf, top));
  FA_CUDA_CHECK(cudaMalloc(&sum, sizeof *sum));
  fill<<<dev.sm_count * 8, 256>>>(buf, top / 4);
  FA_CHECK_LAUNCH();

  // The host's sums of the buffer's words up to each size (the sizes are nested).
  std::vector<std::uint64_t> sizes{0}, expect{0};
  std::uint64_t s = 0, n = 0;
  for (std::uint64_t b = 1ull << 19; b <= top; b *= 2) {
    for (; n < b / 4; ++n) s += word(n);
    sizes.push_back(b), expect.push_back(s);
  }

  fa::TimingOptions opt;
  opt.reps = int(reps);
  const int launches = opt.warmup + opt.reps;
  std::printf("bytes,mb,blocks_per_sm,loads_in_flight,median_us,gbs,pct_copy,copy_gbs,check\n");
  bool ok = true;
  for (std::size_t k = 0; k < sizes.size(); ++k) {
    for (int cfg = 0; cfg < 12; ++cfg) {
      const int per_sm = 1 << (cfg % 4), unroll = 4 << (cfg / 4);  // 1-8 blocks per SM, 4-16 loads in flight
      FA_CUDA_CHECK(cudaMemset(sum, 0, sizeof *sum));
      const int blocks = dev.sm_count * per_sm;
      const std::uint64_t n16 = sizes[k] / 16;
      const auto* src = reinterpret_cast<const uint4*>(buf);
      const fa::Timing t = fa::time_launches(
          [&](cudaStream_t st) {
            if (unroll == 4) read_all<4><<<blocks, kThreads, 0, st>>>(src, n16, sum);
            else if (unroll == 8) read_all<8><<<blocks, kThreads, 0, st>>>(src, n16, sum);
            else read_all<16><<<blocks, kThreads, 0, st>>>(src, n16, sum);
          },
          opt);
      FA_CHECK_LAUNCH();
      unsigned long long got = 0;
      FA_CUDA_CHECK(cudaMemcpy(&got, sum, sizeof got, cudaMemcpyDeviceToHost));
      const bool pass = got == static_cast<unsigned long long>(expect[k] * std::uint64_t(launches));
      ok = ok && pass;
      const double us = t.median_ms * 1e3, gbs = us > 0 ? double(sizes[k]) / (us * 1e3) : 0;
      std::printf("%llu,%.3f,%d,%d,%.2f,%.1f,%.1f,%.1f,%s\n", static_cast<unsigned long long>(sizes[k]), sizes[k] / 1e6,
                  per_sm, unroll, us, gbs, dev.copy_gbs > 0 ? 100 * gbs / dev.copy_gbs : 0.0, dev.copy_gbs,
                  pass ? "ok" : "FAIL");
    }
  }
  FA_CUDA_CHECK(cudaFree(buf));
  FA_CUDA_CHECK(cudaFree(sum));
  if (!ok) std::fprintf(stderr, "read_floor: FAIL: a launch's sum differs from the host's\n");
  return ok ? fa::kExitOk : fa::kExitCheckFailed;
} catch (const fa::UsageError& e) {
  std::fprintf(stderr, "read_floor: %s\n", e.what());
  return fa::kExitUsage;
} catch (const fa::Error& e) {
  std::fprintf(stderr, "read_floor: %s\n", e.what());
  return fa::kExitCheckFailed;
}
