// fuzz_npy.cpp: a libFuzzer target for the .npy reader (harness/npy.h), which reads untrusted
// files (--input). Every input must be read or refused with fa::UsageError: any other exception
// (bad_alloc from a length the file declares, out_of_range), a crash or a leak is a finding.
//
// Build and run with clang (tests/fuzz/CMakeLists.txt, a project of its own):
//   cmake -S tests/fuzz -B build-fuzz -DCMAKE_CXX_COMPILER=clang++ && cmake --build build-fuzz
//   build-fuzz/fuzz_npy -max_total_time=60 -rss_limit_mb=512 build-fuzz/corpus tests/data/npy_corpus
// The seed corpus, tests/data/npy_corpus/, is replayed through the normal reader by test_npy (CI,
// no clang needed); add a finding there as bad_<what>.npy once it is fixed.
#include <cstddef>
#include <cstdint>
#include <cstdio>

#include "check.h"
#include "npy.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;  // fmemopen refuses an empty buffer
  std::FILE* f = fmemopen(const_cast<std::uint8_t*>(data), size, "rb");
  if (!f) return 0;
  try {
    fa::read_npy(f, "fuzz input");
  } catch (const fa::UsageError&) {
  }
  std::fclose(f);
  return 0;
}
