#include "device_check.h"

#include <cuda_runtime.h>

#include <optional>
#include <string>

#include "check.h"
#include "env.h"

namespace fa {

int fake_cc() {
  const std::optional<std::string> v = env_value("FA_FAKE_CC");
  if (!v) return 0;
  const std::size_t dot = v->find('.');
  std::optional<long long> cc;
  if (dot == std::string::npos) {
    cc = parse_whole(*v, 10, 999);  // major·10 + minor: 80
  } else {                          // major.minor: 8.0
    const std::optional<long long> major = parse_whole(v->substr(0, dot), 1, 99),
                                   minor = parse_whole(v->substr(dot + 1), 0, 9);
    if (major && minor) cc = *major * 10 + *minor;
  }
  if (cc) return int(*cc);
  throw UsageError("FA_FAKE_CC=" + *v +
                   ": expected a compute capability such as 80 or 8.0 (major·10 + minor from 10 to 999, or "
                   "major.minor with a one-digit minor)");
}

DeviceCC device_cc(int id) {
  cudaDeviceProp prop{};
  FA_CUDA_CHECK(cudaGetDeviceProperties(&prop, id));
  DeviceCC d;
  d.name = prop.name;
  d.cc = prop.major * 10 + prop.minor;
  if (const int f = fake_cc()) d.cc = f, d.faked = true;
  return d;
}

// "Hopper, sm_90a" for the architecture-specific targets a step may need.
static std::string arch_name(int cc) {
  const char* family = cc == 90 ? "Hopper" : cc >= 100 && cc < 110 ? "Blackwell" : cc == 80 ? "Ampere" : nullptr;
  const std::string sm = "sm_" + std::to_string(cc) + "a";
  return family ? std::string(family) + ", " + sm : sm;
}

std::string wrong_device_message(const std::string& step, int needs_cc, const DeviceCC& dev) {
  if (needs_cc == 0 || dev.cc == needs_cc) return "";
  auto version = [](int cc) { return std::to_string(cc / 10) + "." + std::to_string(cc % 10); };
  return step + " needs a compute capability " + version(needs_cc) + " GPU (" + arch_name(needs_cc) + "); this is " +
         dev.name + " (cc " + version(dev.cc) + (dev.faked ? ", set by FA_FAKE_CC" : "") + ")";
}

std::string wrong_device(const StepInfo& step, int id) {
  if (step.needs_cc == 0) return "";
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || id < 0 || id >= n) {
    cudaGetLastError();
    return "";
  }
  return wrong_device_message(step.name, step.needs_cc, device_cc(id));
}

}  // namespace fa
