// The autotuner of host/autotune.h on the CPU: the pin, the cache per problem class, the refusal
// to time while a stream is capturing a graph, and explicit tuning. The timer and the capture
// query are injected, so no GPU is needed: the "timings" are numbers the test chooses, and the
// launchers are never called (the timer decides what a candidate costs).
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

}  // namespace
