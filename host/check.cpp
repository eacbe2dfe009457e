#include "check.h"


namespace fa {

void throw_cuda_error(cudaError_t err, const char* call, const char* file, int line) {
  throw CudaError(std::string(cudaGetErrorName(err)) + " (" + cudaGetErrorString(err) + ") from " + call + " at " +
                  file + ":" + std::to_string(line));
}

}  // namespace fa
