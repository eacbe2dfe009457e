// device_check.h: can this GPU run a step's kernels? (StepInfo::needs_cc)
//
// A step built for an architecture-specific target (sm_90a: wgmma, TMA) runs only on GPUs of that
// compute capability. The step executable refuses another GPU with kExitWrongDevice and one
// plain sentence, run_all skips the step with that sentence, and the step's GPU tests skip.
//
// Test hook: FA_FAKE_CC=80 (or 8.0) in the environment makes device_cc() report compute
// capability 8.0 for every device, so the refusal can be shown on a Hopper GPU too.
#pragma once
#include <string>

#include "ops.h"

namespace fa {

struct DeviceCC {
  std::string name;    // "NVIDIA H100 80GB HBM3"
  int cc = 0;          // major·10 + minor: 90 for sm_90
  bool faked = false;  // cc comes from FA_FAKE_CC
};

// The compute capability FA_FAKE_CC sets, major·10 + minor: "80" or "8.0" is 80; 0 when it is not set.
// Anything else throws UsageError naming the variable, its value and the two forms.
int fake_cc();

// Device `id`'s name and compute capability (FA_FAKE_CC applied). Throws CudaError if the device
// cannot be queried.
DeviceCC device_cc(int id);

// "" if a GPU of compute capability `dev.cc` runs a step that needs `needs_cc` (0: any GPU the
// build targets; otherwise exactly that one, as sm_90a code runs only on cc 9.0), else the
// sentence the user sees: "18_x needs a compute capability 9.0 GPU (Hopper, sm_90a); this is
// NVIDIA A100-SXM4-80GB (cc 8.0)".
std::string wrong_device_message(const std::string& step, int needs_cc, const DeviceCC& dev);

// The same for `step` on device `id`; "" also when there is no such device (the caller's
// device checks report that).
std::string wrong_device(const StepInfo& step, int id);

}  // namespace fa
