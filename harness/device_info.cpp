#include "device_info.h"

#include <cstdio>

#include "buffer.h"
#include "timer.h"

namespace fa {

bool cuda_device_available(std::string* why) {
  int n = 0;
  const cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess || n == 0) {
    if (why) *why = no_device_reason(err != cudaSuccess ? std::string(cudaGetErrorString(err)) : "no CUDA device found");
    cudaGetLastError();  // clear the sticky-free error so later calls start clean
    return false;
  }
  return true;
}

std::string no_device_reason(const std::string& cuda_text) {
  return "the steps need an NVIDIA GPU of compute capability >= 8.0 and its driver (CUDA says: " + cuda_text + ")";
}

static std::string version_string(int v) { return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10); }

DeviceInfo query_device(int id, bool measure_copy) {
  DeviceInfo d;
  d.id = id;
  FA_CUDA_CHECK(cudaSetDevice(id));
  cudaDeviceProp prop{};
  FA_CUDA_CHECK(cudaGetDeviceProperties(&prop, id));
  d.name = prop.name;
  d.cc_major = prop.major;
  d.cc_minor = prop.minor;
  d.sm_count = prop.multiProcessorCount;
  d.global_mem_bytes = prop.totalGlobalMem;
  d.l2_bytes = std::size_t(prop.l2CacheSize);
  int clock_khz = 0, mem_khz = 0, v = 0;
  FA_CUDA_CHECK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, id));
  FA_CUDA_CHECK(cudaDeviceGetAttribute(&mem_khz, cudaDevAttrMemoryClockRate, id));
  d.sm_clock_ghz = clock_khz * 1e-6;
  d.dram_peak_gbs = 2.0 * mem_khz * 1e3 * (prop.memoryBusWidth / 8.0) * 1e-9;
  FA_CUDA_CHECK(cudaDriverGetVersion(&v));
  d.driver = version_string(v);
  FA_CUDA_CHECK(cudaRuntimeGetVersion(&v));
  d.runtime = version_string(v);

  // FP32 lanes per SM: 64 on GA100 (sm_80), 128 on every later data-centre and consumer part.
  const int cc = d.cc_major * 10 + d.cc_minor;
  const int fp32_lanes = cc == 80 ? 64 : cc >= 75 && cc < 80 ? 64 : 128;
  d.fp32_peak_tflops = d.sm_count * fp32_lanes * 2.0 * d.sm_clock_ghz * 1e-3;
  // Dense fp16 tensor FLOP per SM per clock (fp32 accumulate), from the architecture whitepapers.
  const int tc_flops = cc >= 90 && cc < 100 ? 4096 : cc == 80 ? 2048 : cc >= 86 && cc < 90 ? 1024 : 0;
  d.tensor16_peak_tflops = d.sm_count * double(tc_flops) * d.sm_clock_ghz * 1e-3;

  if (measure_copy) {
    // 1 GiB each way (or less on small cards): far larger than L2, so it measures DRAM.
    const std::size_t bytes = std::min<std::size_t>(std::size_t(1) << 30, d.global_mem_bytes / 8);
    DeviceBuffer<char> src(bytes), dst(bytes);
    FA_CUDA_CHECK(cudaMemset(src.get(), 1, bytes));
    TimingOptions opt;
    opt.flush_l2 = false;  // the copy is 20x the L2 already
    const Timing t = time_launches(
        [&](cudaStream_t s) {
          FA_CUDA_CHECK(cudaMemcpyAsync(dst.get(), src.get(), bytes, cudaMemcpyDeviceToDevice, s));
        },
        opt);
    d.copy_gbs = 2.0 * bytes / (t.median_ms * 1e-3) * 1e-9;
  }
  return d;
}

std::string describe(const DeviceInfo& d) {
  char buf[640];
  std::snprintf(buf, sizeof buf,
                "device %d: %s (sm_%d%d, %d SMs, %.2f GHz, %.1f GiB, L2 %.0f MiB), driver %s, runtime %s\n"
                "peaks: DRAM %.0f GB/s theoretical%s, FP32 %.1f TFLOP/s, FP16 tensor %.0f TFLOP/s (dense)",
                d.id, d.name.c_str(), d.cc_major, d.cc_minor, d.sm_count, d.sm_clock_ghz,
                d.global_mem_bytes / double(1 << 30), d.l2_bytes / double(1 << 20), d.driver.c_str(), d.runtime.c_str(),
                d.dram_peak_gbs,
                d.copy_gbs > 0 ? (", " + std::to_string(int(d.copy_gbs + 0.5)) + " GB/s measured copy").c_str() : "",
                d.fp32_peak_tflops, d.tensor16_peak_tflops);
  return buf;
}

}  // namespace fa
