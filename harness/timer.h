// timer.h: CUDA-event timing. Warm-up launches first (module load, first-touch), then `reps`
// timed launches, each alone between two events, with L2 flushed in between so every
// repetition reads its inputs from device memory as a real first call would. Median reported.
// After each flush the GPU is held (a kernel spinning hold_cycles of its clock) before the start
// event: every launch then starts on a GPU that has been quiet for as long, the same way
// profiles/bench.py times SDPA (torch.cuda._sleep, HOLD_CYCLES), whose dispatch on the host needs
// the hold so that its events time the GPU, not the host.
#pragma once
#include <cuda_runtime.h>

#include <functional>
#include <vector>

namespace fa {

struct TimingOptions {
  int warmup = 3;
  int reps = 20;  // docs/conventions.md, "Measurement": at least 20
  bool flush_l2 = true;
  long long hold_cycles = 1ll << 19;  // after each flush (about 0.3 ms at an H100's clocks); 0: none
};

struct Timing {
  double median_ms = 0, min_ms = 0, max_ms = 0;
  int reps = 0;
};

using Launch = std::function<void(cudaStream_t)>;

Timing time_launches(const Launch& launch, const TimingOptions& opt, cudaStream_t stream = nullptr);

// Several versions timed in turn within each repetition (A, B, A, B, ...), so clock or thermal
// drift during the run affects them alike and their ratio is fair. One Timing per launch.
std::vector<Timing> time_interleaved(const std::vector<Launch>& launches, const TimingOptions& opt,
                                     cudaStream_t stream = nullptr);

// The host's cost of one call: the time to enqueue `calls` launches back to back (nothing waited for
// between them; the queue holds them all), per call, in µs, after one warm-up call. What a decode step's
// launcher does per call (checks, the split rule, the launch API) shows here, apart from the GPU's time.
double host_us_per_call(const Launch& launch, int calls = 50, cudaStream_t stream = nullptr);

// Keeps the GPU busy for `cycles` of its clock (one thread spinning), queued on `stream` (gpu_hold.cu).
void hold_gpu(long long cycles, cudaStream_t stream = nullptr);

}  // namespace fa
