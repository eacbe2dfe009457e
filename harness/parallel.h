// parallel.h: the host's cores over a range of independent indices, for the large host-side loops of
// input preparation (random fills, rounding, 16-bit conversion, page gathers) that would otherwise
// take minutes on one core for a sweep's largest KV caches.
#pragma once
#include <algorithm>
#include <cstddef>
#include <thread>
#include <vector>

namespace fa {

// body(begin, end) over [0, n) split into one contiguous piece per core; below `serial_below`
// indices, one call on this thread. body must touch only what its own indices decide.
template <class Body>
void parallel_ranges(std::size_t n, const Body& body, std::size_t serial_below = std::size_t(1) << 20) {
  const unsigned workers = n < serial_below ? 1u : std::max(1u, std::thread::hardware_concurrency());
  std::vector<std::thread> pool;
  for (unsigned w = 1; w < workers; ++w) pool.emplace_back(body, n * w / workers, n * (w + 1) / workers);
  body(std::size_t(0), n / workers);
  for (auto& t : pool) t.join();
}

}  // namespace fa
