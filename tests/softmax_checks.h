// softmax_checks.h: the checks every softmax step's GPU test runs (steps 01 and 02), so each
// test file says only which step it tests and what it compares against.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "buffer.h"
#include "compare.h"
#include "golden.h"
#include "npy.h"
#include "ops.h"
#include "random.h"
#include "softmax_inputs.h"
#include "tolerance.h"

namespace softmax_checks {

constexpr fa::Tolerance kTol = fa::tol::kSoftmax;

// Runs a step on x [rows, cols] with NaN-poisoned outputs. `offset` shifts both buffers by
// that many floats, to exercise unaligned rows. With `lse`, also asks for the row log-sum-exp.
inline std::vector<float> run(fa::SoftmaxLauncher launch, const std::vector<float>& x, int rows, int cols,
                              int offset = 0, std::vector<float>* lse = nullptr) {
  const std::size_t n = std::size_t(rows) * cols;
  fa::DeviceBuffer<float> dx(n + offset), dy(n + offset), dlse(lse ? rows : 0);
  FA_CUDA_CHECK(cudaMemcpy(dx.get() + offset, x.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  dy.poison_nan();
  dlse.poison_nan();
  launch({dx.get() + offset, dy.get() + offset, rows, cols, lse ? dlse.get() : nullptr}, nullptr);
  FA_CHECK_LAUNCH();
  FA_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<float> y(n);
  FA_CUDA_CHECK(cudaMemcpy(y.data(), dy.get() + offset, n * sizeof(float), cudaMemcpyDeviceToHost));
  if (lse) *lse = dlse.download();
  return y;
}

// log(sum_j exp(x_j)) per row in fp64: -inf for an all -inf row, NaN where NaN or +inf occurs.
inline std::vector<double> reference_lse(const std::vector<float>& x, int rows, int cols) {
  std::vector<double> out(rows);
  for (int r = 0; r < rows; ++r) {
    double m = -INFINITY, l = 0;
    bool nan = false;
    for (int c = 0; c < cols; ++c) {
      const double v = x[std::size_t(r) * cols + c];
      nan |= std::isnan(v) || v == INFINITY;
      m = std::max(m, v);
    }
    if (m == -INFINITY) {
      out[r] = nan ? NAN : -INFINITY;
      continue;
    }
    for (int c = 0; c < cols; ++c) l += std::exp(double(x[std::size_t(r) * cols + c]) - m);
    out[r] = nan ? NAN : m + std::log(l);
  }
  return out;
}

constexpr fa::Tolerance kLseTol = fa::tol::kSoftmaxLse;

// The family's fp64 reference and random rows (harness/softmax_inputs.h).
inline std::vector<double> reference(const std::vector<float>& x, int rows, int cols) {
  return fa::softmax_reference(x, rows, cols);
}

// Fresh uniform rows in [-4, 4) (a new seed every run, printed on failure).
inline std::vector<float> random_rows(int rows, int cols, std::uint64_t seed) {
  return fa::softmax_random_rows(rows, cols, seed);
}

inline void expect_matches_reference(fa::SoftmaxLauncher launch, int rows, int cols, int offset = 0) {
  const std::uint64_t seed = fa::fresh_seed();
  const auto x = random_rows(rows, cols, seed);
  std::vector<float> lse;
  const auto r = fa::compare(run(launch, x, rows, cols, offset, &lse), reference(x, rows, cols), kTol,
                             {std::size_t(rows), std::size_t(cols)});
  EXPECT_TRUE(r.ok()) << rows << "x" << cols << " offset " << offset << " seed " << seed << ": " << r.summary();
  const auto rl = fa::compare(lse, reference_lse(x, rows, cols), kLseTol);
  EXPECT_TRUE(rl.ok()) << "LSE " << rows << "x" << cols << " seed " << seed << ": " << rl.summary();
}

// Every golden softmax case of tests/data, every element.
inline void expect_matches_golden(fa::SoftmaxLauncher launch) {
  const auto cases = golden::cases(FA_DATA_DIR, "softmax");
  ASSERT_FALSE(cases.empty());
  for (const auto& c : cases) {
    const int rows = int(c.integer("rows")), cols = int(c.integer("cols"));
    const fa::NpyArray x = fa::read_npy(c.path("x")), y = fa::read_npy(c.path("y"));
    const std::vector<float> xf(x.data.begin(), x.data.end());
    const auto r = fa::compare(run(launch, xf, rows, cols), y.data, kTol, {std::size_t(rows), std::size_t(cols)});
    EXPECT_TRUE(r.ok()) << c.name << ": " << r.summary();
  }
}

// The rows that break a naive softmax, at a short length (one block per row) and a long one
// (rows split across blocks): huge magnitudes, scattered -inf, all -inf (-> exactly 0),
// NaN and +inf (-> the whole row NaN, never a silently wrong number).
inline void expect_special_rows(fa::SoftmaxLauncher launch) {
  const float inf = INFINITY;
  for (const int cols : {37, 4096, 70001}) {
    const int rows = 6;
    auto x = random_rows(rows, cols, fa::fresh_seed());
    auto row = [&](int r) { return x.begin() + std::size_t(r) * cols; };
    for (int c = 0; c < cols; ++c) row(1)[c] *= 7.5e37f;  // |x| up to 3e38
    for (int c = 0; c < cols; c += 5) row(2)[c] = -inf;   // scattered -inf
    std::fill(row(3), row(3) + cols, -inf);               // all -inf
    row(4)[cols / 2] = NAN;                               // one NaN
    row(5)[cols - 1] = inf;                               // one +inf
    std::vector<float> lse;
    const auto y = run(launch, x, rows, cols, 0, &lse);
    const auto ref = reference(x, rows, cols);
    const auto r = fa::compare(y, ref, kTol, {std::size_t(rows), std::size_t(cols)});
    EXPECT_TRUE(r.ok()) << "cols " << cols << ": " << r.summary();
    const auto rl = fa::compare(lse, reference_lse(x, rows, cols), kLseTol);
    EXPECT_TRUE(rl.ok()) << "LSE, cols " << cols << ": " << rl.summary();
    for (int c = 0; c < cols; ++c) {
      ASSERT_EQ(y[3 * std::size_t(cols) + c], 0.0f) << "all -inf row must give exactly 0, cols " << cols;
      ASSERT_TRUE(std::isnan(y[4 * std::size_t(cols) + c])) << "NaN must poison its row, cols " << cols;
      ASSERT_TRUE(std::isnan(y[5 * std::size_t(cols) + c])) << "+inf must poison its row, cols " << cols;
    }
    for (int r2 : {0, 1, 2}) {  // finite rows sum to 1
      double s = 0;
      for (int c = 0; c < cols; ++c) s += y[std::size_t(r2) * cols + c];
      EXPECT_NEAR(s, 1.0, 1e-4) << "row " << r2 << ", cols " << cols;
    }
  }
}

// Lengths around every boundary of the kernels: warp (32), float4 (4), block, split chunk
// (16384), plus an unaligned base pointer that must take the scalar path.
inline void expect_all_lengths(fa::SoftmaxLauncher launch) {
  for (const int cols : {1,    2,    3,    4,    5,    31,    32,    33,    127,   128,   129,   1000,
                         1023, 1024, 1025, 4096, 4097, 16383, 16384, 16385, 40000, 40001, 100003})
    for (const int rows : {1, 3, 17}) expect_matches_reference(launch, rows, cols);
  expect_matches_reference(launch, 5, 4096, /*offset=*/1);
  expect_matches_reference(launch, 2, 1 << 20, /*offset=*/3);
  expect_matches_reference(launch, 700, 300);
}

}  // namespace softmax_checks
