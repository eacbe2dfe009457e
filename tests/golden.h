// golden.h: the committed golden cases (tests/data/manifest.txt, written by make_reference.py), and
// the rule a reference's output is held to against them (matches_golden).
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "npy.h"

namespace golden {

struct Case {
  std::string op, name, dir;
  std::map<std::string, std::string> params;
  const std::string& param(const std::string& key) const {
    const auto it = params.find(key);
    if (it == params.end()) throw std::runtime_error("golden case " + name + " has no parameter " + key);
    return it->second;
  }
  long long integer(const std::string& key) const { return std::stoll(param(key)); }
  double number(const std::string& key) const { return std::stod(param(key)); }
  std::string path(const std::string& tensor) const { return dir + "/" + name + "." + tensor + ".npy"; }
};

// Tolerance vs the golden data (the rule make_reference.py --check uses):
//   |got - ref| <= 1e-12 * max(1, max|ref|) + 1e-10 * |ref|,  non-finite entries equal exactly.
// Both sides are fp64 on the same float32 inputs and differ only in summation order; the x8
// attention cases amplify that to a few 1e-12 (see make_reference.py), far below any real bug.
constexpr double kAtol = 1e-12, kRtol = 1e-10;

inline ::testing::AssertionResult matches_golden(const std::vector<double>& got, const std::string& path) {
  const fa::NpyArray ref = fa::read_npy(path);
  if (ref.dtype != "<f8")
    return ::testing::AssertionFailure() << path << ": outputs are stored as <f8, found " << ref.dtype;
  if (ref.size() != got.size())
    return ::testing::AssertionFailure() << path << ": " << ref.size() << " elements, reference computed "
                                         << got.size();
  double scale = 1.0;
  for (double r : ref.data)
    if (std::isfinite(r)) scale = std::max(scale, std::abs(r));
  size_t bad = 0, first_bad = 0;
  double max_diff = 0.0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double a = got[i], b = ref.data[i];
    bool ok;
    if (!std::isfinite(b)) {
      ok = std::isnan(b) ? std::isnan(a) : a == b;  // NaN == NaN, -inf == -inf
    } else {
      const double diff = std::abs(a - b);  // NaN if a is NaN: not ok
      ok = diff <= kAtol * scale + kRtol * std::abs(b);
      if (std::isfinite(diff)) max_diff = std::max(max_diff, diff);
    }
    if (!ok && bad++ == 0) first_bad = i;
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  char tol[96];
  std::snprintf(tol, sizeof tol, "|diff| <= %g*%.4g + %g*|ref|", kAtol, scale, kRtol);
  return ::testing::AssertionFailure() << path << ": " << bad << " of " << got.size() << " elements outside " << tol
                                       << "; first at flat index " << first_bad << ": got " << got[first_bad]
                                       << ", golden " << ref.data[first_bad] << "; max |diff| " << max_diff;
}

// Every case of the manifest, or only those of one op ("softmax", "matmul", "attention",
// "attention_gqa", "attention_cache").
inline std::vector<Case> cases(const std::string& dir, const std::string& op = "") {
  std::ifstream in(dir + "/manifest.txt");
  if (!in) throw std::runtime_error("cannot open " + dir + "/manifest.txt (run reference/make_reference.py)");
  std::vector<Case> out;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream ss(line);
    Case c;
    c.dir = dir;
    ss >> c.op >> c.name;
    for (std::string kv; ss >> kv;) {
      const auto eq = kv.find('=');
      if (eq == std::string::npos) throw std::runtime_error("bad manifest entry '" + kv + "' in: " + line);
      c.params[kv.substr(0, eq)] = kv.substr(eq + 1);
    }
    if (op.empty() || c.op == op) out.push_back(std::move(c));
  }
  return out;
}

}  // namespace golden
