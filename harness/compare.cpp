#include "compare.h"

#include <cstdio>

namespace fa {

static std::string index_string(std::size_t i, const std::vector<std::size_t>& shape) {
  if (shape.empty()) return "[" + std::to_string(i) + "]";
  std::vector<std::size_t> idx(shape.size());
  for (std::size_t d = shape.size(); d-- > 0;) {
    idx[d] = shape[d] ? i % shape[d] : 0;
    i = shape[d] ? i / shape[d] : 0;
  }
  std::string s = "[";
  for (std::size_t d = 0; d < idx.size(); ++d) s += (d ? ", " : "") + std::to_string(idx[d]);
  return s + "]";
}

// The lines after the first of a summary: why nothing was compared, or the mismatches.
static std::string mismatch_lines(const CompareResult& r) {
  char buf[256];
  std::string s;
  if (r.count == 0) s += "\n    nothing compared (empty or mismatched sizes)";
  if (r.mismatches) {
    std::snprintf(buf, sizeof buf,
                  "\n    %zu of %zu elements outside tolerance (%zu non-finite where the reference is finite)",
                  r.mismatches, r.count, r.nonfinite_out);
    s += buf;
    for (const auto& m : r.first) {
      std::snprintf(buf, sizeof buf, "\n    at %s: got %.9g, expected %.9g", index_string(m.index, r.shape).c_str(),
                    m.out, m.ref);
      s += buf;
    }
  }
  return s;
}

std::string CompareResult::summary() const {
  char buf[256];
  std::snprintf(buf, sizeof buf, "%s max|err| %.3g  rel_fro %.3g  (%zu elements, atol %.3g, rtol %.3g)",
                ok() ? "PASS" : "FAIL", max_abs_err, rel_fro_err, count, tol.atol, tol.rtol);
  return buf + mismatch_lines(*this);
}

std::string RowCompareResult::summary() const {
  const std::size_t cols = rows ? elements.count / rows : 0;
  char buf[384];
  std::snprintf(buf, sizeof buf,
                "%s max|err| %.3g  rel_fro %.3g  (%zu rows x %zu, per-row bounds %.3g..%.3g; worst row %s: "
                "max|err| %.3g %s %.3g)",
                ok() ? "PASS" : "FAIL", elements.max_abs_err, elements.rel_fro_err, rows, cols, min_bound,
                elements.tol.atol, index_string(worst_row, row_shape).c_str(), worst_err,
                worst_err <= worst_bound ? "<=" : ">", worst_bound);
  std::string s = buf;
  if (failed_rows) {
    std::snprintf(buf, sizeof buf, "\n    %zu of %zu rows over their bound", failed_rows, rows);
    s += buf;
  }
  return s + mismatch_lines(elements);
}

}  // namespace fa
