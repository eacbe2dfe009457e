// softmax_inputs.h: the softmax family's random rows and its fp64 reference, shared by the
// family's --check (family_softmax.cpp) and the GPU tests (tests/softmax_checks.h).
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace fa {

// rows x cols uniform in [-4, 4) (exp of the largest is ~55: no overflow needs the max subtracted
// here; the special rows of the callers do).
std::vector<float> softmax_random_rows(std::size_t rows, std::size_t cols, std::uint64_t seed);

// ref::softmax of every row in fp64, one slice of rows per core.
std::vector<double> softmax_reference(const std::vector<float>& x, std::size_t rows, std::size_t cols);

}  // namespace fa
