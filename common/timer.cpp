#include "timer.h"

#include <algorithm>
#include <vector>

#include "buffer.h"

namespace fa {

Timing time_launches(const std::function<void(cudaStream_t)>& launch, const TimingOptions& opt, cudaStream_t stream) {
  if (opt.reps < 1) throw UsageError("--reps must be at least 1");
  int dev = 0, l2 = 0;
  FA_CUDA_CHECK(cudaGetDevice(&dev));
  FA_CUDA_CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev));
  // Writing a buffer twice the size of L2 evicts whatever the previous repetition left there.
  DeviceBuffer<char> flush(opt.flush_l2 ? std::size_t(2) * std::max(l2, 1 << 20) : 0);

  for (int i = 0; i < opt.warmup; ++i) launch(stream);
  FA_CUDA_CHECK(cudaStreamSynchronize(stream));

  std::vector<cudaEvent_t> start(opt.reps), stop(opt.reps);
  for (int i = 0; i < opt.reps; ++i) {
    FA_CUDA_CHECK(cudaEventCreate(&start[i]));
    FA_CUDA_CHECK(cudaEventCreate(&stop[i]));
  }
  for (int i = 0; i < opt.reps; ++i) {
    if (opt.flush_l2) FA_CUDA_CHECK(cudaMemsetAsync(flush.get(), i & 0xFF, flush.bytes(), stream));
    FA_CUDA_CHECK(cudaEventRecord(start[i], stream));
    launch(stream);
    FA_CUDA_CHECK(cudaEventRecord(stop[i], stream));
  }
  FA_CUDA_CHECK(cudaStreamSynchronize(stream));
  std::vector<double> ms(opt.reps);
  for (int i = 0; i < opt.reps; ++i) {
    float t = 0;
    FA_CUDA_CHECK(cudaEventElapsedTime(&t, start[i], stop[i]));
    ms[i] = t;
    cudaEventDestroy(start[i]);
    cudaEventDestroy(stop[i]);
  }
  std::sort(ms.begin(), ms.end());
  Timing r;
  r.reps = opt.reps;
  r.min_ms = ms.front();
  r.max_ms = ms.back();
  r.median_ms = opt.reps % 2 ? ms[opt.reps / 2] : 0.5 * (ms[opt.reps / 2 - 1] + ms[opt.reps / 2]);
  return r;
}

}  // namespace fa
