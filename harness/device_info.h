// device_info.h: the GPU the numbers were measured on, and the ceilings they are compared to.
#pragma once
#include <cstddef>
#include <string>

namespace fa {

struct DeviceInfo {
  int id = 0;
  std::string name;
  int cc_major = 0, cc_minor = 0, sm_count = 0;
  std::size_t global_mem_bytes = 0, l2_bytes = 0;
  double sm_clock_ghz = 0;          // peak (boost) clock the driver reports
  double dram_peak_gbs = 0;         // theoretical: 2 × memory clock × bus width
  double fp32_peak_tflops = 0;      // SMs × FP32 lanes/SM × 2 × clock
  double tensor16_peak_tflops = 0;  // dense fp16/bf16 tensor cores, fp32 accumulate (table by arch)
  double copy_gbs = 0;              // measured device-to-device copy, bytes read + bytes written
  std::string driver, runtime;      // "13.0"
};

// True if a CUDA device can be used; otherwise `why` says what is missing: no_device_reason() of
// CUDA's own text (cudaGetDeviceCount's error, or "no CUDA device found").
bool cuda_device_available(std::string* why);

// What a machine without a usable GPU is told, CUDA's own text kept as a detail after it:
// "the steps need an NVIDIA GPU of compute capability >= 8.0 and its driver (CUDA says: <cuda_text>)".
// CUDA's text alone misleads on a machine with no NVIDIA driver at all: "CUDA driver version is
// insufficient for CUDA runtime version".
std::string no_device_reason(const std::string& cuda_text);

// Queries device `id` (and makes it current). With measure_copy, also times a large
// device-to-device copy: the practical ceiling for memory-bound steps.
DeviceInfo query_device(int id, bool measure_copy);

std::string describe(const DeviceInfo& d);  // multi-line, for --device-info and table headers

}  // namespace fa
