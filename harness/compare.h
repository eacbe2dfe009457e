// compare.h: element-wise comparison of a result against a reference, every element checked.
//
//   element i passes  iff  |out_i - ref_i| <= atol + rtol * |ref_i|
//   non-finite values pass only where the reference has the same value (NaN where NaN is
//   expected, -inf where -inf is expected); a NaN in `out` where `ref` is finite (e.g. an
//   element the kernel never wrote, still holding the NaN poison) always fails.
//
// compare_rows: the same test row by row of a [rows, cols] result, each row with its own atol
// (rtol 0): row r passes iff max_j |out_rj - ref_rj| <= row_atol[r] (fp16/bf16 attention, where
// the bound of each query row comes from that row's own low-precision error; tolerance.h).
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
  std::size_t count = 0;                  // elements compared
  std::size_t mismatches = 0;             // elements outside the tolerance
  std::size_t nonfinite_out = 0;          // non-finite in out where ref is finite
  double max_abs_err = 0;                 // over elements where both are finite
  double max_ref = 0;                     // max |ref| over finite elements
  double rel_fro_err = 0;                 // ||out - ref||_F / ||ref||_F over finite pairs
  double sum_sq_err = 0, sum_sq_ref = 0;  // ||out - ref||_F², ||ref||_F² (to merge results)
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
  r.sum_sq_err = err2, r.sum_sq_ref = ref2;
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

struct RowCompareResult {
  CompareResult elements;  // every element of every row (tol.atol: the largest row bound)
  std::size_t rows = 0, failed_rows = 0;
  // The row with the largest max|err| / bound (any row with a non-finite mismatch first), as a
  // row index of the full result (row_ids below), with its error and bound.
  std::size_t worst_row = 0;
  double worst_err = 0, worst_bound = 0;
  double min_bound = 0;                // the smallest row bound (elements.tol.atol: the largest)
  std::vector<std::size_t> row_shape;  // shape without the last dimension, to print [b, h, i]

  bool ok() const { return failed_rows == 0 && elements.ok(); }
  // "PASS max|err| 3.1e-04  rel_fro 2e-04  (512 rows x 64, per-row bounds 2.4e-04..9.8e-03; worst
  // row [0, 1, 1]: max|err| 1.2e-03 <= 9.8e-03)", then on failure the failed rows and the first
  // mismatches with their indices.
  std::string summary() const;
};

// out, ref: [row_atol.size(), cols] row-major. shape: of the full result, its last dimension
// `cols` (optional, for indices). row_ids: where the compared rows are a subset of a larger
// result (sampled rows), the row index of each in that result, so indices name the real row.
template <class Out, class Ref>
RowCompareResult compare_rows(const std::vector<Out>& out, const std::vector<Ref>& ref, std::size_t cols,
                              const std::vector<double>& row_atol, std::vector<std::size_t> shape = {},
                              const std::vector<std::size_t>& row_ids = {}) {
  RowCompareResult r;
  r.rows = row_atol.size();
  if (!shape.empty()) r.row_shape.assign(shape.begin(), shape.end() - 1);
  r.elements.shape = std::move(shape);
  if (out.size() != ref.size() || out.size() != r.rows * cols || (!row_ids.empty() && row_ids.size() != r.rows)) {
    r.elements.count = out.size();
    r.elements.mismatches = out.size() > ref.size() ? out.size() : ref.size();
    return r;
  }
  CompareResult& all = r.elements;
  double worst_ratio = -1;
  for (std::size_t i = 0; i < r.rows; ++i) {
    const std::size_t id = row_ids.empty() ? i : row_ids[i];
    const CompareResult c = compare(out.data() + i * cols, ref.data() + i * cols, cols, {row_atol[i], 0});
    all.count += c.count;
    all.mismatches += c.mismatches;
    all.nonfinite_out += c.nonfinite_out;
    all.max_abs_err = std::fmax(all.max_abs_err, c.max_abs_err);
    all.max_ref = std::fmax(all.max_ref, c.max_ref);
    all.sum_sq_err += c.sum_sq_err;
    all.sum_sq_ref += c.sum_sq_ref;
    all.tol.atol = std::fmax(all.tol.atol, row_atol[i]);
    for (const Mismatch& m : c.first)
      if (all.first.size() < 5) all.first.push_back({id * cols + m.index, m.out, m.ref});
    r.failed_rows += c.mismatches ? 1 : 0;
    r.min_bound = i == 0 ? row_atol[i] : std::fmin(r.min_bound, row_atol[i]);
    const double ratio = c.nonfinite_out > 0 || (c.mismatches > 0 && c.max_abs_err <= row_atol[i])
                             ? INFINITY  // a non-finite mismatch
                         : row_atol[i] > 0 ? c.max_abs_err / row_atol[i]
                                           : (c.max_abs_err > 0 ? INFINITY : 0.0);
    if (ratio > worst_ratio) {
      worst_ratio = ratio;
      r.worst_row = id, r.worst_err = c.max_abs_err, r.worst_bound = row_atol[i];
    }
  }
  all.rel_fro_err = all.sum_sq_ref > 0 ? std::sqrt(all.sum_sq_err / all.sum_sq_ref) : std::sqrt(all.sum_sq_err);
  return r;
}

}  // namespace fa
