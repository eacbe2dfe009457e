// main() of every GPU test binary: skips (exit 77, which CTest reports as "Skipped") with a
// clear message where there is no CUDA device, so the suite still passes on CPU-only CI.
#include <gtest/gtest.h>

#include <cstdio>

#include "device_info.h"

int main(int argc, char** argv) {
  std::string why;
  if (!fa::cuda_device_available(&why)) {
    std::printf("SKIPPED: no CUDA device (%s). GPU tests need an NVIDIA GPU of compute capability >= 8.0.\n",
                why.c_str());
    return 77;
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
