// streams.h: a second stream for kernels that may run beside the caller's (steps 07+: the
// backward's dK/dV and dQ kernels, which share inputs and no outputs).
#pragma once
#include <cuda_runtime.h>

namespace fa {

// Fork/join around one stream:
//
//   fa::StreamFork fork(stream);                  // side() starts where `stream` is now
//   kernel_a<<<grid, block, smem, fork.side()>>>(...);
//   kernel_b<<<grid, block, smem, stream>>>(...);  // may run at the same time as kernel_a
//   fork.join();                                  // `stream` continues after both
//
// The side stream (non-blocking) and the two events are created once per device and reused;
// a StreamFork destroyed without join() joins anyway (errors are then ignored).
class StreamFork {
 public:
  // high_priority: the side stream is one of the device's greatest priority, so the block scheduler
  // starts its kernels' blocks before those of kernels on `stream` (default priority) while both wait.
  explicit StreamFork(cudaStream_t stream, bool high_priority = false);
  ~StreamFork();
  StreamFork(const StreamFork&) = delete;
  StreamFork& operator=(const StreamFork&) = delete;

  cudaStream_t side() const { return side_; }
  void join();

 private:
  cudaStream_t stream_, side_;
  cudaEvent_t joined_event_;
  bool joined_ = false;
};

}  // namespace fa
