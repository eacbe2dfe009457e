#include "check.h"

#include <cstdint>

#include "ops.h"

namespace fa {

void throw_cuda_error(cudaError_t err, const char* call, const char* file, int line) {
  throw CudaError(std::string(cudaGetErrorName(err)) + " (" + cudaGetErrorString(err) + ") from " + call + " at " +
                  file + ":" + std::to_string(line));
}

void check_attention_launch(const StepInfo& step, const AttnParams& p, std::initializer_list<const void*> ptrs,
                            const char* names) {
  Problem pr;
  pr.family = Family::Attention;
  pr.attn = p;
  if (step.supports)
    if (const std::string why = step.supports(pr); !why.empty()) throw UsageError(std::string(step.name) + ": " + why);
  if (p.batch < 1 || p.heads < 1 || p.seq_q < 1 || p.seq_k < 1 || p.head_dim < 1)
    throw UsageError(std::string(step.name) + ": every size must be at least 1");
  for (const void* ptr : ptrs)
    if (reinterpret_cast<std::uintptr_t>(ptr) % 16 != 0)
      throw UsageError(std::string(step.name) + ": " + names + " must be 16-byte aligned (16-byte vector loads)");
}

}  // namespace fa
