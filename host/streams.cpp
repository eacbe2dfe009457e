// streams.cpp: see streams.h.
#include "streams.h"

#include <map>
#include <mutex>
#include <utility>

#include "check.h"

namespace fa {
namespace {

struct SideStream {
  cudaStream_t side = nullptr;
  cudaEvent_t fork = nullptr, join = nullptr;  // recorded on the caller's stream, on the side stream
};

// One per device and priority, created on first use; never destroyed (they live as long as the context).
SideStream& side_stream_of_current_device(bool high_priority) {
  static std::mutex mutex;
  static std::map<std::pair<int, bool>, SideStream> by_device;
  int dev = 0;
  FA_CUDA_CHECK(cudaGetDevice(&dev));
  std::lock_guard<std::mutex> lock(mutex);
  SideStream& s = by_device[{dev, high_priority}];
  if (!s.side) {
    int least = 0, greatest = 0;  // numerically: greatest <= least (e.g. -5 and 0)
    FA_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    FA_CUDA_CHECK(cudaStreamCreateWithPriority(&s.side, cudaStreamNonBlocking, high_priority ? greatest : least));
    FA_CUDA_CHECK(cudaEventCreateWithFlags(&s.fork, cudaEventDisableTiming));
    FA_CUDA_CHECK(cudaEventCreateWithFlags(&s.join, cudaEventDisableTiming));
  }
  return s;
}

}  // namespace

StreamFork::StreamFork(cudaStream_t stream, bool high_priority) : stream_(stream) {
  SideStream& s = side_stream_of_current_device(high_priority);
  side_ = s.side, joined_event_ = s.join;
  // A stream waits on the event's state at the time of the call, so one event can be re-recorded
  // by the next fork at once.
  FA_CUDA_CHECK(cudaEventRecord(s.fork, stream_));
  FA_CUDA_CHECK(cudaStreamWaitEvent(side_, s.fork, 0));
}

void StreamFork::join() {
  joined_ = true;
  FA_CUDA_CHECK(cudaEventRecord(joined_event_, side_));
  FA_CUDA_CHECK(cudaStreamWaitEvent(stream_, joined_event_, 0));
}

StreamFork::~StreamFork() {
  if (!joined_ && cudaEventRecord(joined_event_, side_) == cudaSuccess)
    (void)cudaStreamWaitEvent(stream_, joined_event_, 0);
}

}  // namespace fa
