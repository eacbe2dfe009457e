// gpu_hold.cu: timer.h's hold, a kernel that keeps the GPU busy for a number of its own clock cycles
// (one thread spinning on clock64, as torch.cuda._sleep does for profiles/bench.py's SDPA timer).
#include <cuda_runtime.h>

#include "check.h"
#include "timer.h"

namespace fa {
namespace {

__global__ void spin(long long cycles) {
  const long long t0 = clock64();
  while (clock64() - t0 < cycles) {
  }
}

}  // namespace

void hold_gpu(long long cycles, cudaStream_t stream) {
  spin<<<1, 1, 0, stream>>>(cycles);
  FA_CHECK_LAUNCH();
}

}  // namespace fa
