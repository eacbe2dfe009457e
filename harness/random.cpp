#include "random.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <thread>

namespace fa {
namespace {
// splitmix64: a counter-based generator, so element i needs no state from element i-1.
inline std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}
}  // namespace

void fill_uniform(std::vector<float>& v, std::uint64_t seed, float lo, float hi) {
  const std::uint64_t key = splitmix64(seed);
  auto fill = [&](std::size_t begin, std::size_t end) {
    for (std::size_t i = begin; i < end; ++i) {
      const double u = double(splitmix64(key ^ (i * 0xD6E8FEB86659FD93ull)) >> 11) * 0x1.0p-53;
      const float x = float(lo + (hi - lo) * u);
      v[i] = x < hi ? x : std::nextafter(hi, lo);  // rounding to float may land on hi itself
    }
  };
  const std::size_t n = v.size();
  const unsigned workers = n < (1u << 20) ? 1u : std::max(1u, std::thread::hardware_concurrency());
  std::vector<std::thread> pool;
  for (unsigned w = 1; w < workers; ++w) pool.emplace_back(fill, n * w / workers, n * (w + 1) / workers);
  fill(0, n / workers);
  for (auto& t : pool) t.join();
}

std::uint64_t fresh_seed() {
  static std::atomic<std::uint64_t> counter{0};
  const auto now = std::chrono::high_resolution_clock::now().time_since_epoch().count();
  return splitmix64(std::uint64_t(now) + counter.fetch_add(1)) % 1000000007ull;
}

}  // namespace fa
