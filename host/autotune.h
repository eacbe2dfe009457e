// autotune.h: a step that compiles several instances of its kernel (tile shapes) picks the fastest
// per problem class, once, and launches it from then on (step 11; step 16 reuses it).
//
//   fa::Autotuner<Key, Args> tuner(step_name, "FA_STEP11_CONFIG");
//   tuner.pick(key, candidates, args, stream)   the candidate to launch for problem class `key`:
//                                               the pinned one, else the cached winner, else it
//                                               times every candidate now and caches the fastest
//   tuner.tune(key, candidates, args, stream)   time the class now (again), outside any capture
//
// Key is the step's problem class (anything std::map orders: a tuple of head_dim, causal, length
// buckets...). Timing runs on the caller's own buffers (`args`) and stream: one warm-up, then the
// median of 5 event-timed launches per candidate. Every candidate computes the same outputs, so
// tuning is invisible in the result. The environment variable named by the step (the pin) holds a
// candidate's name: that candidate runs and the tuner never times (profiling, tests).
//
// CUDA graphs: tuning waits on events, which a stream that is capturing a graph forbids. So pick()
// never times a class while `stream` is capturing: it throws fa::UsageError (launch once before the
// capture, or call tune()). Once a class is tuned or pinned, pick() makes no CUDA call at all and
// the launch it leads to can be captured.
//
// The timer and the capture query are constructor arguments, so tests/test_autotune.cpp drives the
// cache and the pin on the CPU with made-up timings.
//
// The attention steps that tune (11, 16) share the rest of the plumbing, AttnAutotuner (bottom): the
// problem class of an attention problem, one cache per element type, and the dispatch from the
// element type to the candidates of that type:
//
//   fa::AttnAutotuner<fa::AttnFwdArgs> tuner(step_name, "FA_STEP11_CONFIG", candidates<__half>,
//                                            candidates<__nv_bfloat16>, /*by_variant=*/false);
//   tuner.launch(args, stream)        pick (as above) and launch
//   tuner.tune(args, stream)          time the class of `args` now
//
// A step keeps its candidates, `const std::vector<TuneCandidate<Args>>& candidates<T>(int head_dim)`,
// the instances of head_dim <= 64 and of 64 < head_dim <= 128.
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "check.h"
#include "env.h"
#include "ops.h"

namespace fa {

// One compiled instance: its name (for the pin and the messages) and its launcher.
template <class Args>
struct TuneCandidate {
  const char* name;
  void (*launch)(const Args&, cudaStream_t);
};

// The median time of `reps` launches of `c` on `stream` (events), after one warm-up launch that also
// does any one-time setup of the instance (shared-memory opt-in).
template <class Args>
float median_launch_ms(const TuneCandidate<Args>& c, const Args& a, cudaStream_t stream, int reps = 5) {
  struct Events {
    cudaEvent_t start = nullptr, stop = nullptr;
    ~Events() {
      if (start) cudaEventDestroy(start);
      if (stop) cudaEventDestroy(stop);
    }
  } ev;
  FA_CUDA_CHECK(cudaEventCreate(&ev.start));
  FA_CUDA_CHECK(cudaEventCreate(&ev.stop));
  c.launch(a, stream);
  std::vector<float> ms(reps);
  for (float& x : ms) {
    FA_CUDA_CHECK(cudaEventRecord(ev.start, stream));
    c.launch(a, stream);
    FA_CUDA_CHECK(cudaEventRecord(ev.stop, stream));
    FA_CUDA_CHECK(cudaEventSynchronize(ev.stop));
    FA_CUDA_CHECK(cudaEventElapsedTime(&x, ev.start, ev.stop));
  }
  std::sort(ms.begin(), ms.end());
  return ms[reps / 2];
}

// True while `stream` is capturing a CUDA graph (or its capture has been invalidated).
inline bool stream_is_capturing(cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  FA_CUDA_CHECK(cudaStreamIsCapturing(stream, &status));
  return status != cudaStreamCaptureStatusNone;
}

template <class Key, class Args>
class Autotuner {
 public:
  using Candidate = TuneCandidate<Args>;
  using Timer = std::function<float(const Candidate&, const Args&, cudaStream_t)>;
  using CaptureQuery = std::function<bool(cudaStream_t)>;

  // step_name prefixes the messages; pin_env names the environment variable that pins a candidate.
  Autotuner(
      const char* step_name, const char* pin_env,
      Timer timer = [](const Candidate& c, const Args& a, cudaStream_t s) { return median_launch_ms(c, a, s); },
      CaptureQuery capturing = stream_is_capturing)
      : step_(step_name), pin_env_(pin_env), timer_(std::move(timer)), capturing_(std::move(capturing)) {}

  // The candidate to launch for class `key` (an element of `cands`, which must not be empty):
  //   1. the pin, if its variable is set and not empty (UsageError naming the candidates if it names none;
  //      `scope`, if given, says which candidates: "head_dim <= 64");
  //   2. else the class's cached winner;
  //   3. else the class is tuned now (UsageError instead if `stream` is capturing a graph).
  const Candidate& pick(const Key& key, const std::vector<Candidate>& cands, const Args& a, cudaStream_t stream,
                        const char* scope = nullptr) {
    if (const std::optional<std::string> pin = env_value(pin_env_)) return pinned(*pin, cands, scope);
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = cache_.find(key); it != cache_.end()) return cands.at(it->second);
    if (capturing_(stream))
      throw UsageError(std::string(step_) +
                       ": this problem class is not tuned yet, and tuning times launches, which a stream that is "
                       "capturing a CUDA graph cannot do: launch once before the capture (or tune it explicitly), "
                       "then capture");
    return cands.at(tune_locked(key, cands, a, stream));
  }

  // Times every candidate of class `key` on `a` and `stream` now and caches the fastest (replacing
  // an earlier choice). `stream` must not be capturing.
  const Candidate& tune(const Key& key, const std::vector<Candidate>& cands, const Args& a, cudaStream_t stream) {
    std::lock_guard<std::mutex> lock(mu_);
    return cands.at(tune_locked(key, cands, a, stream));
  }

  // Whether class `key` has a cached winner (a pinned run caches nothing).
  bool tuned(const Key& key) const {
    std::lock_guard<std::mutex> lock(mu_);
    return cache_.count(key) != 0;
  }

 private:
  const Candidate& pinned(const std::string& pin, const std::vector<Candidate>& cands, const char* scope) const {
    for (const Candidate& c : cands)
      if (pin == c.name) return c;
    std::string names;
    for (const Candidate& c : cands) names += std::string(" ") + c.name;
    throw UsageError(std::string(step_) + ": " + pin_env_ + "=" + pin + " is not a candidate" +
                     (scope ? std::string(" for ") + scope : std::string()) + " (candidates:" + names + ")");
  }

  // The fastest candidate (the first of equals); cached only once every candidate has been timed.
  int tune_locked(const Key& key, const std::vector<Candidate>& cands, const Args& a, cudaStream_t stream) {
    int best = 0;
    float best_ms = 0.f;
    for (std::size_t i = 0; i < cands.size(); ++i) {
      const float ms = timer_(cands[i], a, stream);
      if (i == 0 || ms < best_ms) best_ms = ms, best = int(i);
    }
    cache_[key] = best;
    return best;
  }

  const char* step_;
  const char* pin_env_;
  Timer timer_;
  CaptureQuery capturing_;
  mutable std::mutex mu_;
  std::map<Key, int> cache_;
};

// ---- the attention steps' autotuner (steps 11 and 16) -------------------------------------------------
// ceil(log2(n)): lengths bucketed by powers of two (…, 1024, 2048, …); 0 for n <= 1.
inline int length_bucket(int n) {
  int b = 0;
  while ((1 << b) < n) ++b;
  return b;
}

// A problem class: (element type, head_dim instance, causal, variant, seq_q bucket, seq_k bucket). The
// best tile shape depends on how many key tiles a block walks and how many blocks fill the GPU, both set
// by the lengths; the instance is 64 for head_dim <= 64, else 128 (smaller head dims are padded).
using AttnClass = std::tuple<DType, int, bool, int, int, int>;

template <class Args>  // AttnFwdArgs or AttnBwdArgs
class AttnAutotuner {
 public:
  using Candidate = TuneCandidate<Args>;
  using Candidates = const std::vector<Candidate>& (*)(int head_dim);  // a step's candidates<T>
  using Timer = typename Autotuner<AttnClass, Args>::Timer;
  using CaptureQuery = typename Autotuner<AttnClass, Args>::CaptureQuery;

  // f16, bf16: the step's candidates of each element type. by_variant: whether the variant
  // (AttnParams::variant) is part of the problem class; without it every variant shares one winner.
  AttnAutotuner(
      const char* step_name, const char* pin_env, Candidates f16, Candidates bf16, bool by_variant,
      Timer timer = [](const Candidate& c, const Args& a, cudaStream_t s) { return median_launch_ms(c, a, s); },
      CaptureQuery capturing = stream_is_capturing)
      : f16_(f16),
        bf16_(bf16),
        by_variant_(by_variant),
        tuner_(step_name, pin_env, std::move(timer), std::move(capturing)) {}

  // Autotuner::pick for the class of `a`, among the candidates of its element type and head_dim.
  const Candidate& pick(const Args& a, cudaStream_t stream) {
    return tuner_.pick(problem_class(a.p), candidates(a.p), a, stream, scope(a.p.head_dim));
  }
  void launch(const Args& a, cudaStream_t stream) { pick(a, stream).launch(a, stream); }
  // Autotuner::tune for the class of `a`.
  const Candidate& tune(const Args& a, cudaStream_t stream) {
    return tuner_.tune(problem_class(a.p), candidates(a.p), a, stream);
  }
  bool tuned(const AttnParams& p) const { return tuner_.tuned(problem_class(p)); }

  AttnClass problem_class(const AttnParams& p) const {
    const int variant = by_variant_ ? p.variant : 0;
    return {p.dtype, instance(p.head_dim), p.causal, variant, length_bucket(p.seq_q), length_bucket(p.seq_k)};
  }
  // The candidates of head_dim's instance, the same names in both element types (for the tests, which
  // pin each in turn).
  int candidate_count(int head_dim) const { return int(f16_(head_dim).size()); }
  std::string candidate_name(int head_dim, int i) const { return f16_(head_dim).at(i).name; }

  static int instance(int head_dim) { return head_dim <= 64 ? 64 : 128; }
  // Which candidates a pin is looked up among, for its error message.
  static const char* scope(int head_dim) { return head_dim <= 64 ? "head_dim <= 64" : "64 < head_dim <= 128"; }

 private:
  const std::vector<Candidate>& candidates(const AttnParams& p) const {
    return (p.dtype == DType::F16 ? f16_ : bf16_)(p.head_dim);
  }

  Candidates f16_, bf16_;
  bool by_variant_;
  Autotuner<AttnClass, Args> tuner_;
};

}  // namespace fa
