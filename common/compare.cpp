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

std::string CompareResult::summary() const {
  char buf[256];
  std::snprintf(buf, sizeof buf, "%s max|err| %.3g  rel_fro %.3g  (%zu elements, atol %.3g, rtol %.3g)",
                ok() ? "PASS" : "FAIL", max_abs_err, rel_fro_err, count, tol.atol, tol.rtol);
  std::string s = buf;
  if (count == 0) s += "\n    nothing compared (empty or mismatched sizes)";
  if (mismatches) {
    std::snprintf(buf, sizeof buf,
                  "\n    %zu of %zu elements outside tolerance (%zu non-finite where the reference is finite)",
                  mismatches, count, nonfinite_out);
    s += buf;
    for (const auto& m : first) {
      std::snprintf(buf, sizeof buf, "\n    at %s: got %.9g, expected %.9g", index_string(m.index, shape).c_str(),
                    m.out, m.ref);
      s += buf;
    }
  }
  return s;
}

}  // namespace fa
