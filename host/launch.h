// launch.h: what an attention launcher does before it launches, shared by every step.
//
//   fa::step_supports(step, problem)      "" or why the step cannot run it (attn_rule + supports)
//   fa::check_attention_launch(...)       the same, plus sizes and 16-byte alignment: throws
//   fa::opt_in_shared_memory(kernel, n)   once per kernel: allow n bytes of dynamic shared memory
//   fa::fa2_problem(seq, d, causal, t)    the FlashAttention-2 benchmark shape
//   fa::sm_count()                        the current GPU's SMs (0 without a GPU), asked once per device
//   fa::l2_bytes()                        its L2 cache's bytes (0 without a GPU), asked once per device
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <initializer_list>
#include <string>

#include "check.h"
#include "ops.h"

namespace fa {

// "" if `step` can run `p`, else the reason: first the step's declared AttnRule (attention
// steps), then its own supports() if it has one.
std::string step_supports(const StepInfo& step, const Problem& p);

// What every attention launcher checks before it launches, throwing UsageError("<step>: ..."):
// the step supports the problem (step_supports), every size is at least 1, and each pointer in
// `ptrs` (named by `names`, e.g. "Q, K, V and O") is 16-byte aligned (the kernels' vector loads).
void check_attention_launch(const StepInfo& step, const AttnParams& p, std::initializer_list<const void*> ptrs,
                            const char* names);

// The FlashAttention-2 benchmark shape: batch·seq = 16384 tokens, heads·head_dim = 2048, scale
// 1/sqrt(head_dim).
Problem fa2_problem(int seq, int head_dim, bool causal, DType dtype);

// The number of SMs of the current device, asked of the runtime once per device and cached; 0 when
// there is no usable device (a CPU-only caller, e.g. a workspace size asked for without a GPU: the
// error is cleared, not left for the next launch check to find).
int sm_count();
// The size of the current device's L2 cache in bytes, asked and cached the same way (0 without a device).
int l2_bytes();

// Allows `kernel` `bytes` of dynamic shared memory (above the default 48 KB needs an opt-in) and
// asks for the largest shared-memory carveout. Fails with a clear message if the device has less.
void opt_in_shared_memory(const void* kernel, std::size_t bytes, const char* step_name);
template <class Kernel>
void opt_in_shared_memory(Kernel* kernel, std::size_t bytes, const char* step_name) {
  opt_in_shared_memory(reinterpret_cast<const void*>(kernel), bytes, step_name);
}

}  // namespace fa
