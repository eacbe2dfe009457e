// softmax_inputs.cpp: see softmax_inputs.h.
#include "softmax_inputs.h"

#include <algorithm>
#include <thread>

#include "random.h"
#include "reference.h"

namespace fa {

std::vector<float> softmax_random_rows(std::size_t rows, std::size_t cols, std::uint64_t seed) {
  std::vector<float> x(rows * cols);
  fill_uniform(x, seed, -4.0f, 4.0f);
  return x;
}

std::vector<double> softmax_reference(const std::vector<float>& x, std::size_t rows, std::size_t cols) {
  std::vector<double> y(rows * cols);
  auto work = [&](std::size_t r0, std::size_t r1) {
    std::vector<double> row(cols);
    for (std::size_t r = r0; r < r1; ++r) {
      std::copy(x.begin() + r * cols, x.begin() + (r + 1) * cols, row.begin());
      ref::softmax(row.data(), y.data() + r * cols, 1, (long long)cols);
    }
  };
  const std::size_t t = std::max(1u, std::min(std::thread::hardware_concurrency(), 32u));
  std::vector<std::thread> pool;
  for (std::size_t i = 0; i < t; ++i) pool.emplace_back(work, rows * i / t, rows * (i + 1) / t);
  for (auto& th : pool) th.join();
  return y;
}

}  // namespace fa
