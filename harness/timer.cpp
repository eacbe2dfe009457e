#include "timer.h"

#include <algorithm>
#include <chrono>
#include <vector>

#include "buffer.h"

namespace fa {

std::vector<Timing> time_interleaved(const std::vector<Launch>& launches, const TimingOptions& opt,
                                     cudaStream_t stream) {
  if (opt.reps < 1) throw UsageError("--reps must be at least 1");
  int dev = 0, l2 = 0;
  FA_CUDA_CHECK(cudaGetDevice(&dev));
  FA_CUDA_CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev));
  // Writing a buffer twice the size of L2 evicts whatever the previous repetition left there.
  DeviceBuffer<char> flush(opt.flush_l2 ? std::size_t(2) * std::max(l2, 1 << 20) : 0);

  for (int i = 0; i < opt.warmup; ++i)
    for (const auto& launch : launches) launch(stream);
  FA_CUDA_CHECK(cudaStreamSynchronize(stream));

  const std::size_t n = launches.size(), reps = std::size_t(opt.reps);
  std::vector<cudaEvent_t> events(2 * n * reps);
  for (auto& e : events) FA_CUDA_CHECK(cudaEventCreate(&e));
  for (std::size_t r = 0; r < reps; ++r)
    for (std::size_t k = 0; k < n; ++k) {
      if (opt.flush_l2) {
        FA_CUDA_CHECK(cudaMemsetAsync(flush.get(), int(r & 0xFF), flush.bytes(), stream));
        if (opt.hold_cycles > 0) hold_gpu(opt.hold_cycles, stream);  // outside the events (timer.h)
      }
      FA_CUDA_CHECK(cudaEventRecord(events[2 * (r * n + k)], stream));
      launches[k](stream);
      FA_CUDA_CHECK(cudaEventRecord(events[2 * (r * n + k) + 1], stream));
    }
  FA_CUDA_CHECK(cudaStreamSynchronize(stream));

  std::vector<Timing> out(n);
  for (std::size_t k = 0; k < n; ++k) {
    std::vector<double> ms(reps);
    for (std::size_t r = 0; r < reps; ++r) {
      float t = 0;
      FA_CUDA_CHECK(cudaEventElapsedTime(&t, events[2 * (r * n + k)], events[2 * (r * n + k) + 1]));
      ms[r] = t;
    }
    std::sort(ms.begin(), ms.end());
    out[k].reps = int(reps);
    out[k].min_ms = ms.front();
    out[k].max_ms = ms.back();
    out[k].median_ms = reps % 2 ? ms[reps / 2] : 0.5 * (ms[reps / 2 - 1] + ms[reps / 2]);
  }
  for (auto& e : events) cudaEventDestroy(e);
  return out;
}

Timing time_launches(const Launch& launch, const TimingOptions& opt, cudaStream_t stream) {
  return time_interleaved({launch}, opt, stream).front();
}

double host_us_per_call(const Launch& launch, int calls, cudaStream_t stream) {
  launch(stream);
  FA_CUDA_CHECK(cudaStreamSynchronize(stream));
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < calls; ++i) launch(stream);
  const auto t1 = std::chrono::steady_clock::now();
  FA_CUDA_CHECK(cudaStreamSynchronize(stream));
  return std::chrono::duration<double, std::micro>(t1 - t0).count() / calls;
}

}  // namespace fa
