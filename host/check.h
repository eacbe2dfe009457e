// check.h: errors and CUDA error checking for the host-side harness.
#pragma once
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

namespace fa {

// Exit codes every executable uses.
enum ExitCode : int {
  kExitOk = 0,
  kExitCheckFailed = 1,  // a correctness check failed, or a CUDA call failed at run time
  kExitUsage = 2,        // bad flag, bad value, unsupported shape, unreadable input file
  kExitNoDevice = 3,     // no usable CUDA device
  kExitWrongDevice = 4,  // the GPU is not the one the step is built for (StepInfo::needs_cc), e.g. a
                         // Hopper-only step (sm_90a) on an A100; run_all skips such a step instead
};

// Any harness error: the message is what the user sees after "error: ".
struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};
// Bad input from the user (flags, shapes, files): exits with kExitUsage.
struct UsageError : Error {
  using Error::Error;
};
// A CUDA runtime call failed.
struct CudaError : Error {
  using Error::Error;
};

[[noreturn]] void throw_cuda_error(cudaError_t err, const char* call, const char* file, int line);

inline void cuda_check(cudaError_t err, const char* call, const char* file, int line) {
  if (err != cudaSuccess) throw_cuda_error(err, call, file, line);
}

}  // namespace fa

// FA_CUDA_CHECK(cudaMalloc(&p, n)) -> throws fa::CudaError naming the call, the error and file:line.
#define FA_CUDA_CHECK(call) ::fa::cuda_check((call), #call, __FILE__, __LINE__)
// After a kernel launch: catches bad launch configurations at the launch site.
#define FA_CHECK_LAUNCH() ::fa::cuda_check(cudaGetLastError(), "kernel launch", __FILE__, __LINE__)
