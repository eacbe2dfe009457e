#include "random.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>

#include "parallel.h"

namespace fa {
namespace {
// splitmix64: a counter-based generator, so element i needs no state from element i-1.
inline std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// The i-th 53-bit draw of a stream (`key` from the seed), as an integer in [0, 2^53).
inline std::uint64_t draw53(std::uint64_t key, std::size_t i) {
  return splitmix64(key ^ (i * 0xD6E8FEB86659FD93ull)) >> 11;
}

// v[i] = value(i) for every i, split over the host's cores for large vectors (value(i) depends on i alone).
template <class Value>
void fill_each(std::vector<float>& v, const Value& value) {
  parallel_ranges(v.size(), [&](std::size_t begin, std::size_t end) {
    for (std::size_t i = begin; i < end; ++i) v[i] = value(i);
  });
}
}  // namespace

void fill_uniform(std::vector<float>& v, std::uint64_t seed, float lo, float hi) {
  const std::uint64_t key = splitmix64(seed);
  fill_each(v, [&](std::size_t i) {
    const double u = double(draw53(key, i)) * 0x1.0p-53;
    const float x = float(lo + (hi - lo) * u);
    return x < hi ? x : std::nextafter(hi, lo);  // rounding to float may land on hi itself
  });
}

void fill_normal(std::vector<float>& v, std::uint64_t seed, float mean, float sd) {
  const std::uint64_t key = splitmix64(seed);
  fill_each(v, [&](std::size_t i) {
    // Box-Muller on the pair (i & ~1, i | 1): elements 2p and 2p+1 are the cosine and the sine
    // of one pair of uniforms, each element computing its pair itself (i alone decides it).
    const std::size_t pair = i & ~std::size_t(1);
    const double u1 = double(draw53(key, pair) + 1) * 0x1.0p-53;  // (0, 1]: log(u1) is finite
    const double u2 = double(draw53(key, pair + 1)) * 0x1.0p-53;  // [0, 1)
    const double r = std::sqrt(-2.0 * std::log(u1)), t = 6.283185307179586476925 * u2;
    return float(mean + sd * r * (i & 1 ? std::sin(t) : std::cos(t)));
  });
}

std::uint64_t fresh_seed() {
  static std::atomic<std::uint64_t> counter{0};
  const auto now = std::chrono::high_resolution_clock::now().time_since_epoch().count();
  return splitmix64(std::uint64_t(now) + counter.fetch_add(1)) % 1000000007ull;
}

}  // namespace fa
