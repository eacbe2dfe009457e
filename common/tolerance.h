// tolerance.h: every correctness tolerance of the series, in one place. The executables'
// --check and the GoogleTest suites use the same numbers. Element i passes when
//   |out_i - ref_i| <= atol + rtol * |ref_i|       (compare.h)
// For outputs whose magnitude depends on the shape (matmul, gradients), atol is a fraction of
// the largest |ref| of that output (scaled_tolerance below).
#pragma once
#include <cmath>
#include <vector>

#include "compare.h"

namespace fa::tol {

// Softmax outputs lie in [0, 1]; fp32 exp and a fp32 sum of up to millions of terms stay
// near 1e-6 relative error.
constexpr Tolerance kSoftmax{1e-8, 1e-5};
// The row log-sum-exp: a log of a sum near 1..n, plus the row max.
constexpr Tolerance kSoftmaxLse{1e-5, 1e-6};
// fp32 GEMM: a K-term fp32 dot product errs like sqrt(K)·eps·|terms|; this holds to K = 16384
// with a wide margin.
constexpr double kMatmulAtolRel = 1e-5, kMatmulRtol = 1e-5;
// fp32 attention: O is a convex combination of V rows (|O| ~ 1), accumulated over up to 16k
// keys in fp32; LSE is a log-sum-exp of scores; gradients are sums over seq terms.
constexpr double kAttnOutAtolRel = 2e-5, kAttnOutRtol = 2e-4;
constexpr Tolerance kAttnLse{1e-4, 1e-5};
constexpr double kAttnGradAtolRel = 1e-4, kAttnGradRtol = 1e-3;
// ...and an absolute floor for gradients that cancel to zero: with one visible key,
// dS = P·(dP − Δ) with dP = Δ exactly, but the two are the same dot product summed in different
// orders, so fp32 leaves ~1e-7·|dO|·|V| where fp64 leaves ~1e-16. The inputs of every check are
// O(1), so 1e-5 is ~100x that roundoff and far below any real error.
constexpr double kAttnGradAtolFloor = 1e-5;

}  // namespace fa::tol

namespace fa {

// atol = max(atol_rel · max |ref| (finite values only), atol_floor), rtol as given.
template <class T>
Tolerance scaled_tolerance(double atol_rel, double rtol, const std::vector<T>& ref, double atol_floor = 0) {
  double m = 0;
  for (const T& v : ref)
    if (std::isfinite(double(v))) m = std::fmax(m, std::fabs(double(v)));
  return {std::fmax(atol_rel * (m > 0 ? m : 1.0), atol_floor), rtol};
}

}  // namespace fa
