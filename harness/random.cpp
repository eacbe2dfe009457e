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
  // Marsaglia's polar method, one pair of elements (2p, 2p + 1) at a time: a point (x, y) uniform in the
  // square [-1, 1)², drawn again until it lies inside the unit circle (π/4 of the time), gives two independent
  // standard normals x·f and y·f with f = sqrt(-2 ln s / s), s = x² + y². One logarithm per pair and no sine
  // or cosine: faster than Box-Muller, whose double-precision sine or cosine per element made a sweep's
  // largest caches (2^31 elements) slow to draw. Try k of pair p draws from a key that depends on (seed, k)
  // alone, so the pair still depends on (seed, p) alone.
  const std::uint64_t first = splitmix64(seed);
  const std::size_t n = v.size();
  parallel_ranges((n + 1) / 2, [&](std::size_t begin, std::size_t end) {
    for (std::size_t p = begin; p < end; ++p) {
      double x = 0, y = 0, s = 0;
      for (std::uint64_t key = first, tries = 0; tries < 64; ++tries, key = splitmix64(key + 1)) {
        x = double(draw53(key, 2 * p)) * 0x1.0p-52 - 1.0;  // [-1, 1)
        y = double(draw53(key, 2 * p + 1)) * 0x1.0p-52 - 1.0;
        s = x * x + y * y;
        if (s > 0.0 && s < 1.0) break;
      }
      // 64 misses in a row (probability (1 - π/4)^64, below 10^-42) would leave s outside (0, 1): zeros then.
      const double f = s > 0.0 && s < 1.0 ? std::sqrt(-2.0 * std::log(s) / s) : 0.0;
      v[2 * p] = float(mean + sd * x * f);
      if (2 * p + 1 < n) v[2 * p + 1] = float(mean + sd * y * f);
    }
  });
}

std::uint64_t fresh_seed() {
  static std::atomic<std::uint64_t> counter{0};
  const auto now = std::chrono::high_resolution_clock::now().time_since_epoch().count();
  return splitmix64(std::uint64_t(now) + counter.fetch_add(1)) % 1000000007ull;
}

}  // namespace fa
