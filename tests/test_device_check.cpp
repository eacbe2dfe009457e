// The device check of StepInfo::needs_cc without a GPU: the sentence a Hopper-only step prints on
// another GPU, and that steps for any GPU (needs_cc 0) are never refused.
#include <gtest/gtest.h>

#include <cstdlib>

#include "device_check.h"
#include "device_info.h"

namespace {

fa::DeviceCC device(const char* name, int cc, bool faked = false) {
  fa::DeviceCC d;
  d.name = name, d.cc = cc, d.faked = faked;
  return d;
}

TEST(DeviceCheck, HopperStepOnAmpereSaysWhatItNeedsAndWhatThisIs) {
  EXPECT_EQ(fa::wrong_device_message("17_wgmma_forward", 90, device("NVIDIA A100-SXM4-80GB", 80)),
            "17_wgmma_forward needs a compute capability 9.0 GPU (Hopper, sm_90a); this is NVIDIA A100-SXM4-80GB "
            "(cc 8.0)");
}

TEST(DeviceCheck, SaysWhenTheCapabilityIsFaked) {
  const std::string m = fa::wrong_device_message("18_x", 90, device("NVIDIA H100 80GB HBM3", 80, true));
  EXPECT_NE(m.find("this is NVIDIA H100 80GB HBM3 (cc 8.0, set by FA_FAKE_CC)"), std::string::npos) << m;
}

TEST(DeviceCheck, TheRightGpuAndAnyGpuStepsAreNotRefused) {
  EXPECT_EQ(fa::wrong_device_message("17_x", 90, device("NVIDIA H100 80GB HBM3", 90)), "");
  for (int cc : {75, 80, 86, 89, 90, 100, 120})
    EXPECT_EQ(fa::wrong_device_message("06_causal_stages", 0, device("any", cc)), "") << cc;
}

TEST(DeviceCheck, SmNinetyACodeDoesNotRunOnLaterGpus) {
  // Architecture-specific code (sm_90a) is not forward compatible: cc 10.0 is refused too.
  const std::string m = fa::wrong_device_message("17_x", 90, device("NVIDIA B200", 100));
  EXPECT_NE(m.find("needs a compute capability 9.0 GPU"), std::string::npos) << m;
  EXPECT_NE(m.find("(cc 10.0)"), std::string::npos) << m;
}

// Without a GPU or its driver, the message says what the steps need first; CUDA's own words (on a
// machine with no NVIDIA driver: "CUDA driver version is insufficient for CUDA runtime version")
// follow as a detail.
TEST(DeviceCheck, NoDeviceSaysWhatIsNeededBeforeCudasText) {
  EXPECT_EQ(fa::no_device_reason("CUDA driver version is insufficient for CUDA runtime version"),
            "the steps need an NVIDIA GPU of compute capability >= 8.0 and its driver (CUDA says: CUDA driver "
            "version is insufficient for CUDA runtime version)");
  std::string why;
  if (fa::cuda_device_available(&why)) GTEST_SKIP() << "a CUDA device is present";
  EXPECT_EQ(why.rfind("the steps need an NVIDIA GPU of compute capability >= 8.0 and its driver (CUDA says: ", 0), 0u)
      << why;
}

TEST(DeviceCheck, NoDeviceIsLeftToTheNoDeviceCheck) {
  std::string why;
  if (fa::cuda_device_available(&why)) GTEST_SKIP() << "a CUDA device is present";
  fa::StepInfo hopper{"17_x", "test", fa::Family::Attention};
  hopper.needs_cc = 90;
  EXPECT_EQ(fa::wrong_device(hopper, 0), "");  // "no CUDA device" (exit 3) is reported elsewhere
}

}  // namespace
