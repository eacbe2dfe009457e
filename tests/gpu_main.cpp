// main() of every GPU test binary: skips (exit 77, which CTest reports as "Skipped") with a
// clear message where there is no CUDA device, or where the step under test (or the step it is
// checked against) is built for another GPU (StepInfo::needs_cc), so the suite still passes on
// CPU-only CI and on GPUs a Hopper-only step cannot use. tests/CMakeLists.txt defines
// FA_TEST_STEP_NS (e.g. step17) and, where the step has a PREV, FA_TEST_PREV_NS.
#include <gtest/gtest.h>

#include <cstdio>

#include "device_check.h"
#include "device_info.h"

#ifdef FA_TEST_STEP_NS
namespace FA_TEST_STEP_NS {
const fa::StepInfo& info();
}
#endif
#ifdef FA_TEST_PREV_NS
namespace FA_TEST_PREV_NS {
const fa::StepInfo& info();
}
#endif

int main(int argc, char** argv) {
  std::string why;
  if (!fa::cuda_device_available(&why)) {
    std::printf("SKIPPED: no CUDA device: %s\n", why.c_str());
    return 77;
  }
  for (const fa::StepInfo* step : {
#ifdef FA_TEST_STEP_NS
           &FA_TEST_STEP_NS::info(),
#endif
#ifdef FA_TEST_PREV_NS
           &FA_TEST_PREV_NS::info(),
#endif
           static_cast<const fa::StepInfo*>(nullptr)}) {
    if (!step) continue;
    why = fa::wrong_device(*step, 0);
    if (!why.empty()) {
      std::printf("SKIPPED: %s\n", why.c_str());
      return 77;
    }
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
