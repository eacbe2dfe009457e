// The autotuner of host/autotune.h on the CPU: the pin, the cache per problem class, the refusal
// to time while a stream is capturing a graph, and explicit tuning. The timer and the capture
// query are injected, so no GPU is needed: the "timings" are numbers the test chooses, and the
// launchers are never called (the timer decides what a candidate costs). AttnAutotuner (steps 11
// and 16): the problem class of an attention problem and the element type's candidates.
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "autotune.h"
#include "check.h"

namespace {

struct Args {
  int n = 0;
};
void no_launch(const Args&, cudaStream_t) { FAIL() << "the injected timer never launches"; }

using Tuner = fa::Autotuner<int, Args>;
using Candidate = Tuner::Candidate;
const std::vector<Candidate> kCands = {{"a", no_launch}, {"b", no_launch}, {"c", no_launch}};
constexpr const char* kPin = "FA_TEST_AUTOTUNE_PIN";

// A timer that reads each candidate's "time" from a table the test sets, and counts its calls.
struct FakeClock {
  std::map<std::string, float> ms{{"a", 3.f}, {"b", 1.f}, {"c", 2.f}};
  int calls = 0;
  bool capturing = false;
  Tuner tuner() {
    return Tuner(
        "test_step", kPin,
        [this](const Candidate& c, const Args&, cudaStream_t) {
          ++calls;
          return ms.at(c.name);
        },
        [this](cudaStream_t) { return capturing; });
  }
};

class Autotune : public ::testing::Test {
 protected:
  void SetUp() override { unsetenv(kPin); }
  void TearDown() override { unsetenv(kPin); }
};

TEST_F(Autotune, FirstPickTimesEveryCandidateAndTakesTheFastest) {
  FakeClock clock;
  Tuner t = clock.tuner();
  EXPECT_FALSE(t.tuned(7));
  EXPECT_STREQ(t.pick(7, kCands, Args{}, nullptr).name, "b");
  EXPECT_EQ(clock.calls, 3);
  EXPECT_TRUE(t.tuned(7));
}

TEST_F(Autotune, LaterPicksOfTheClassUseTheCacheWithoutTiming) {
  FakeClock clock;
  Tuner t = clock.tuner();
  t.pick(7, kCands, Args{}, nullptr);
  clock.ms["c"] = 0.5f;  // c is faster now, but the class is already tuned
  for (int i = 0; i < 3; ++i) EXPECT_STREQ(t.pick(7, kCands, Args{}, nullptr).name, "b");
  EXPECT_EQ(clock.calls, 3);
}

TEST_F(Autotune, EachClassIsTunedOnItsOwn) {
  FakeClock clock;
  Tuner t = clock.tuner();
  EXPECT_STREQ(t.pick(1, kCands, Args{}, nullptr).name, "b");
  clock.ms["a"] = 0.1f;
  EXPECT_STREQ(t.pick(2, kCands, Args{}, nullptr).name, "a");
  EXPECT_EQ(clock.calls, 6);
  EXPECT_STREQ(t.pick(1, kCands, Args{}, nullptr).name, "b");  // class 1 keeps its own winner
}

TEST_F(Autotune, TiesGoToTheFirstCandidate) {
  FakeClock clock;
  clock.ms = {{"a", 2.f}, {"b", 1.f}, {"c", 1.f}};
  Tuner t = clock.tuner();
  EXPECT_STREQ(t.pick(0, kCands, Args{}, nullptr).name, "b");
}

TEST_F(Autotune, PinSelectsByNameWithoutTimingOrCaching) {
  FakeClock clock;
  Tuner t = clock.tuner();
  setenv(kPin, "c", 1);
  EXPECT_STREQ(t.pick(7, kCands, Args{}, nullptr).name, "c");
  EXPECT_EQ(clock.calls, 0);
  EXPECT_FALSE(t.tuned(7));
  unsetenv(kPin);
  EXPECT_STREQ(t.pick(7, kCands, Args{}, nullptr).name, "b");  // unpinned: tuned as usual
}

TEST_F(Autotune, AnEmptyPinIsNotSet) {  // host/env.h: FA_X= unsets a knob for one command
  FakeClock clock;
  Tuner t = clock.tuner();
  setenv(kPin, "", 1);
  EXPECT_STREQ(t.pick(7, kCands, Args{}, nullptr).name, "b");
  EXPECT_EQ(clock.calls, 3);
}

TEST_F(Autotune, PinOverridesATunedClass) {
  FakeClock clock;
  Tuner t = clock.tuner();
  t.pick(7, kCands, Args{}, nullptr);
  setenv(kPin, "a", 1);
  EXPECT_STREQ(t.pick(7, kCands, Args{}, nullptr).name, "a");
}

TEST_F(Autotune, UnknownPinIsAUsageErrorNamingTheCandidates) {
  FakeClock clock;
  Tuner t = clock.tuner();
  setenv(kPin, "nope", 1);
  try {
    t.pick(7, kCands, Args{}, nullptr, "head_dim <= 64");
    FAIL() << "no error";
  } catch (const fa::UsageError& e) {
    EXPECT_STREQ(e.what(),
                 "test_step: FA_TEST_AUTOTUNE_PIN=nope is not a candidate for head_dim <= 64 (candidates: a b c)");
  }
  EXPECT_EQ(clock.calls, 0);
}

TEST_F(Autotune, RefusesToTuneWhileCapturingAndTunesAfterwards) {
  FakeClock clock;
  Tuner t = clock.tuner();
  clock.capturing = true;
  try {
    t.pick(7, kCands, Args{}, nullptr);
    FAIL() << "no error";
  } catch (const fa::UsageError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("test_step: "), std::string::npos) << what;
    EXPECT_NE(what.find("capturing a CUDA graph"), std::string::npos) << what;
    EXPECT_NE(what.find("launch once before the capture"), std::string::npos) << what;
  }
  EXPECT_EQ(clock.calls, 0);
  EXPECT_FALSE(t.tuned(7));
  clock.capturing = false;
  EXPECT_STREQ(t.pick(7, kCands, Args{}, nullptr).name, "b");
}

TEST_F(Autotune, TunedOrPinnedClassesLaunchWhileCapturing) {
  FakeClock clock;
  Tuner t = clock.tuner();
  t.pick(7, kCands, Args{}, nullptr);
  clock.capturing = true;
  EXPECT_STREQ(t.pick(7, kCands, Args{}, nullptr).name, "b");
  setenv(kPin, "c", 1);
  EXPECT_STREQ(t.pick(8, kCands, Args{}, nullptr).name, "c");
  EXPECT_EQ(clock.calls, 3);
}

TEST_F(Autotune, ExplicitTuneRetimesAndReplacesTheChoice) {
  FakeClock clock;
  Tuner t = clock.tuner();
  t.pick(7, kCands, Args{}, nullptr);
  clock.ms["c"] = 0.5f;
  EXPECT_STREQ(t.tune(7, kCands, Args{}, nullptr).name, "c");
  EXPECT_EQ(clock.calls, 6);
  EXPECT_STREQ(t.pick(7, kCands, Args{}, nullptr).name, "c");
}

TEST_F(Autotune, AFailedTuningCachesNothing) {
  FakeClock clock;
  clock.ms.erase("c");  // the timer throws (std::out_of_range) on the third candidate
  Tuner t = clock.tuner();
  EXPECT_ANY_THROW(t.pick(7, kCands, Args{}, nullptr));
  EXPECT_FALSE(t.tuned(7));
}

// ---- AttnAutotuner: the attention steps' problem class and the element type's candidates ----------------
// Candidates per element type and head_dim instance, each with its own made-up time.
const std::vector<fa::TuneCandidate<fa::AttnFwdArgs>>& f16_cands(int d) {
  static const std::vector<fa::TuneCandidate<fa::AttnFwdArgs>> d64 = {{"h64a", nullptr}, {"h64b", nullptr}},
                                                               d128 = {{"h128a", nullptr}, {"h128b", nullptr}};
  return d <= 64 ? d64 : d128;
}
const std::vector<fa::TuneCandidate<fa::AttnFwdArgs>>& bf16_cands(int d) {
  static const std::vector<fa::TuneCandidate<fa::AttnFwdArgs>> d64 = {{"b64a", nullptr}, {"b64b", nullptr}},
                                                               d128 = {{"b128a", nullptr}, {"b128b", nullptr}};
  return d <= 64 ? d64 : d128;
}

struct AttnClock {
  std::map<std::string, float> ms{{"h64a", 2.f}, {"h64b", 1.f}, {"h128a", 1.f}, {"h128b", 2.f},
                                  {"b64a", 1.f}, {"b64b", 2.f}, {"b128a", 2.f}, {"b128b", 1.f}};
  int calls = 0;
  fa::AttnAutotuner<fa::AttnFwdArgs> tuner(bool by_variant) {
    return fa::AttnAutotuner<fa::AttnFwdArgs>(
        "test_step", kPin, f16_cands, bf16_cands, by_variant,
        [this](const fa::TuneCandidate<fa::AttnFwdArgs>& c, const fa::AttnFwdArgs&, cudaStream_t) {
          ++calls;
          return ms.at(c.name);
        },
        [](cudaStream_t) { return false; });
  }
};

fa::AttnFwdArgs attn(int seq_q, int seq_k, int head_dim, fa::DType t = fa::DType::F16, bool causal = false,
                     int variant = 0) {
  fa::AttnFwdArgs a{};
  a.p.seq_q = seq_q, a.p.seq_k = seq_k, a.p.head_dim = head_dim, a.p.dtype = t, a.p.causal = causal;
  a.p.variant = variant;
  return a;
}

TEST(AttnAutotune, LengthBucketsArePowersOfTwo) {
  EXPECT_EQ(fa::length_bucket(1), 0);
  EXPECT_EQ(fa::length_bucket(2), 1);
  EXPECT_EQ(fa::length_bucket(3), 2);
  EXPECT_EQ(fa::length_bucket(1024), 10);
  EXPECT_EQ(fa::length_bucket(1025), 11);
  EXPECT_EQ(fa::length_bucket(2048), 11);
}

TEST(AttnAutotune, ProblemClassIsTypeInstanceCausalVariantAndBuckets) {
  AttnClock clock;
  const auto t = clock.tuner(/*by_variant=*/true), u = clock.tuner(/*by_variant=*/false);
  const fa::AttnParams p = attn(1000, 3000, 40, fa::DType::BF16, true, 1).p;
  EXPECT_EQ(t.problem_class(p), fa::AttnClass(fa::DType::BF16, 64, true, 1, 10, 12));
  EXPECT_EQ(u.problem_class(p), fa::AttnClass(fa::DType::BF16, 64, true, 0, 10, 12));  // step 11: no variant
  EXPECT_EQ(t.problem_class(attn(1, 1, 65).p), fa::AttnClass(fa::DType::F16, 128, false, 0, 0, 0));
  EXPECT_EQ(t.problem_class(attn(1, 1, 128).p), t.problem_class(attn(1, 1, 96).p));
}

TEST_F(Autotune, AttnPicksAmongTheElementTypesCandidatesWithACachePerType) {
  AttnClock clock;
  auto t = clock.tuner(/*by_variant=*/false);
  EXPECT_STREQ(t.pick(attn(2048, 2048, 64), nullptr).name, "h64b");
  EXPECT_STREQ(t.pick(attn(2048, 2048, 64, fa::DType::BF16), nullptr).name, "b64a");
  EXPECT_STREQ(t.pick(attn(2048, 2048, 128), nullptr).name, "h128a");
  EXPECT_STREQ(t.pick(attn(2048, 2048, 128, fa::DType::BF16), nullptr).name, "b128b");
  EXPECT_EQ(clock.calls, 8);
  EXPECT_STREQ(t.pick(attn(1500, 2000, 48), nullptr).name, "h64b");  // same class: the cache
  EXPECT_EQ(clock.calls, 8);
  EXPECT_TRUE(t.tuned(attn(1025, 1025, 1).p));
  EXPECT_FALSE(t.tuned(attn(2048, 2048, 64, fa::DType::F16, true).p));  // causal: a class of its own
}

TEST_F(Autotune, AttnVariantIsAClassOnlyWhenAsked) {
  AttnClock clock;
  auto t = clock.tuner(/*by_variant=*/true), u = clock.tuner(/*by_variant=*/false);
  t.pick(attn(64, 64, 64), nullptr);
  u.pick(attn(64, 64, 64), nullptr);
  EXPECT_FALSE(t.tuned(attn(64, 64, 64, fa::DType::F16, false, 1).p));
  EXPECT_TRUE(u.tuned(attn(64, 64, 64, fa::DType::F16, false, 1).p));
}

TEST_F(Autotune, AttnExplicitTuneAndTheTestsCandidateNames) {
  AttnClock clock;
  auto t = clock.tuner(/*by_variant=*/false);
  EXPECT_STREQ(t.tune(attn(64, 64, 64), nullptr).name, "h64b");
  EXPECT_TRUE(t.tuned(attn(64, 64, 64).p));
  EXPECT_EQ(t.candidate_count(64), 2);
  EXPECT_EQ(t.candidate_name(64, 0), "h64a");
  EXPECT_EQ(t.candidate_name(100, 1), "h128b");
}

TEST_F(Autotune, AttnUnknownPinNamesTheHeadDimsScope) {
  AttnClock clock;
  auto t = clock.tuner(/*by_variant=*/false);
  setenv(kPin, "nope", 1);
  try {
    t.pick(attn(64, 64, 128), nullptr);
    FAIL() << "no error";
  } catch (const fa::UsageError& e) {
    EXPECT_STREQ(e.what(),
                 "test_step: FA_TEST_AUTOTUNE_PIN=nope is not a candidate for 64 < head_dim <= 128 (candidates: "
                 "h128a h128b)");
  }
  setenv(kPin, "b64b", 1);
  EXPECT_STREQ(t.pick(attn(64, 64, 64, fa::DType::BF16), nullptr).name, "b64b");
  EXPECT_EQ(clock.calls, 0);
}

}  // namespace
