// compare.h: element-wise comparison of a result against a reference, every element checked.
//
//   element i passes  iff  |out_i - ref_i| <= atol + rtol * |ref_i|
//   non-finite values pass only where the reference has the same value (NaN where NaN is
//   expected, -inf where -inf is expected); a NaN in `out` where `ref` is finite (e.g. an
//   element the kernel never wrote, still holding the NaN poison) always fails.
#pragma once
#include <cmath>
#include <cstddef>
#include <string>
#include <vector>

namespace fa {

struct Tolerance {
  double atol;
  double rtol;
};

struct Mismatch {
  std::size_t index;
  double out, ref;
};

struct CompareResult {
  std::size_t count = 0;          // elements compared
  std::size_t mismatches = 0;     // elements outside the tolerance
  std::size_t nonfinite_out = 0;  // non-finite in out where ref is finite
  double max_abs_err = 0;         // over elements where both are finite
  double max_ref = 0;             // max |ref| over finite elements
  double rel_fro_err = 0;         // ||out - ref||_F / ||ref||_F over finite pairs
  Tolerance tol{0, 0};
  std::vector<Mismatch> first;     // the first few mismatches
  std::vector<std::size_t> shape;  // optional, to print indices as [i, j, ...]

  bool ok() const { return mismatches == 0 && count > 0; }
  // One line: "PASS max|err| 1.2e-07 rel_fro 3e-08 (atol 1e-06, rtol 1e-05, 1048576 elements)",
  // followed on failure by the first mismatches with their indices.
  std::string summary() const;
};

template <class Out, class Ref>
CompareResult compare(const Out* out, const Ref* ref, std::size_t n, Tolerance tol,
                      std::vector<std::size_t> shape = {}) {
  CompareResult r;
  r.count = n;
  r.tol = tol;
  r.shape = std::move(shape);
  double err2 = 0, ref2 = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const double o = double(out[i]), e = double(ref[i]);
    bool good;
    if (!std::isfinite(e)) {
      good = std::isnan(e) ? std::isnan(o) : o == e;
    } else if (!std::isfinite(o)) {
      good = false;
      ++r.nonfinite_out;
    } else {
      const double d = std::fabs(o - e);
      r.max_abs_err = std::fmax(r.max_abs_err, d);
      r.max_ref = std::fmax(r.max_ref, std::fabs(e));
      err2 += d * d;
      ref2 += e * e;
      good = d <= tol.atol + tol.rtol * std::fabs(e);
    }
    if (!good) {
      if (r.first.size() < 5) r.first.push_back({i, o, e});
      ++r.mismatches;
    }
  }
  r.rel_fro_err = ref2 > 0 ? std::sqrt(err2 / ref2) : std::sqrt(err2);
  return r;
}

template <class Out, class Ref>
CompareResult compare(const std::vector<Out>& out, const std::vector<Ref>& ref, Tolerance tol,
                      std::vector<std::size_t> shape = {}) {
  if (out.size() != ref.size()) {
    CompareResult r;
    r.count = out.size();
    r.mismatches = out.size() > ref.size() ? out.size() : ref.size();
    return r;
  }
  return compare(out.data(), ref.data(), out.size(), tol, std::move(shape));
}

}  // namespace fa
