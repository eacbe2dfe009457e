#include "env.h"

#include <cstdlib>

#include "check.h"

namespace fa {

std::optional<std::string> env_value(const char* name) {
  const char* v = std::getenv(name);
  if (!v || !*v) return std::nullopt;
  return std::string(v);
}

std::optional<long long> parse_whole(std::string_view text, long long lo, long long hi) {
  const bool negative = !text.empty() && text.front() == '-';
  if (negative) text.remove_prefix(1);
  if (text.empty()) return std::nullopt;
  // Digit by digit, stopping before the magnitude passes the range's: no overflow, whatever the length.
  const unsigned long long limit = negative ? (lo < 0 ? 0ull - static_cast<unsigned long long>(lo) : 0ull)
                                            : (hi > 0 ? static_cast<unsigned long long>(hi) : 0ull);
  unsigned long long m = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    const unsigned d = unsigned(c - '0');
    if (d > limit || m > (limit - d) / 10) return std::nullopt;
    m = m * 10 + d;
  }
  if (negative && m == 0) return std::nullopt;  // "-0": a sign only on a negative number
  const long long v = negative ? -static_cast<long long>(m - 1) - 1 : static_cast<long long>(m);
  if (v < lo || v > hi) return std::nullopt;
  return v;
}

std::optional<int> env_int(const char* name, int lo, int hi, const char* what) {
  const std::optional<std::string> v = env_value(name);
  if (!v) return std::nullopt;
  if (const std::optional<long long> n = parse_whole(*v, lo, hi)) return int(*n);
  throw UsageError(std::string(name) + "=" + *v + ": expected a whole number from " + std::to_string(lo) + " to " +
                   std::to_string(hi) + " (" + what + ")");
}

bool env_switch(const char* name, bool unset, const char* what) {
  const std::optional<std::string> v = env_value(name);
  if (!v) return unset;
  if (const std::optional<long long> n = parse_whole(*v, 0, 1)) return *n == 1;
  throw UsageError(std::string(name) + "=" + *v + ": expected 0 or 1 (" + what + ")");
}

}  // namespace fa
