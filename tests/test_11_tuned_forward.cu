// Step 11 (tuned forward: template instances + autotuner) against step 10 in the same dtype, and
// against the fp64 reference, with the per-row low-precision rule of
// common/tolerance.h (2·max|ref_lowp − ref| + 1 ulp per query row; LSE to fp32 tolerance).
// Both dtypes, both head-dim instances, causal and not, lengths that are multiples of neither
// tile, seq_q ≠ seq_k both ways, padded head dims, and what it refuses.
#include <cstdlib>

#include "attention_checks.h"

namespace step10 {
const fa::StepInfo& info();
}
namespace step11 {
const fa::StepInfo& info();
int candidate_count(int head_dim);
std::string candidate_name(int head_dim, int i);
}

namespace {
using namespace attention_checks;
const fa::StepInfo& kStep = step11::info();
const fa::StepInfo& kPrev = step10::info();
constexpr fa::DType kTypes[] = {fa::DType::F16, fa::DType::BF16};

TEST(Step11TunedForward, MatchesStep10OnRealisticShapes) {
  for (fa::DType t : kTypes)
    for (int d : {64, 128})
      for (bool causal : {false, true}) expect_matches_step(kStep, kPrev, {2, 4, 1024, 1024, d, causal, 0, t}, false);
}

TEST(Step11TunedForward, MatchesStep10WhenSeqQDiffersFromSeqK) {
  for (fa::DType t : kTypes)
    for (int d : {64, 128})
      for (auto [sq, sk] : {std::pair{300, 1000}, std::pair{1000, 300}, std::pair{777, 513}, std::pair{129, 1000}})
        expect_matches_step(kStep, kPrev, {1, 3, sq, sk, d, sq < sk, 0, t}, false);
}

TEST(Step11TunedForward, MatchesGoldenInputs) {
  for (fa::DType t : kTypes) expect_matches_golden(kStep, /*backward=*/false, t);
}

TEST(Step11TunedForward, MatchesFp64OnEdgeShapes) {
  for (fa::DType t : kTypes)
    for (int d : {64, 128})
      for (Shape s : edge_shapes(d)) {
        s.dtype = t;
        expect_matches_reference(kStep, s, /*backward=*/false);
      }
}

// head_dim below its instance runs with zero-padded columns; a scale other than 1/sqrt(d).
TEST(Step11TunedForward, PaddedHeadDims) {
  for (fa::DType t : kTypes) {
    expect_matches_reference(kStep, {1, 2, 50, 70, 40, true, 0.3, t}, false);
    expect_matches_reference(kStep, {2, 1, 33, 33, 8, false, 0, t}, false);
    expect_matches_reference(kStep, {1, 2, 130, 90, 96, true, 0, t}, false);
  }
}

// One long head: 64 key tiles of online rescaling, the large row included.
TEST(Step11TunedForward, LongSequenceMatchesFp64) {
  for (fa::DType t : kTypes) expect_matches_reference(kStep, {1, 1, 4096, 4096, 64, true, 0, t}, false);
}

TEST(Step11TunedForward, RefusesWhatItCannotRun) {
  fa::Problem pr;
  pr.family = fa::Family::Attention;
  pr.attn.dtype = fa::DType::F32;
  EXPECT_NE(kStep.supports(pr), "") << "fp32";
  pr.attn.dtype = fa::DType::F16;
  EXPECT_EQ(kStep.supports(pr), "");
  for (int d : {4, 66, 136, 256}) {
    pr.attn.head_dim = d;
    EXPECT_NE(kStep.supports(pr), "") << "head_dim " << d;
  }
}

// Every candidate instance, not only the ones the autotuner picks here: each against fp64 on
// ragged shapes that take the masked, unmasked and partial-tile paths, both dtypes.
TEST(Step11TunedForward, EveryCandidateMatchesFp64) {
  for (fa::DType t : kTypes)
    for (int d : {64, 128})
      for (int i = 0; i < step11::candidate_count(d); ++i) {
        const std::string name = step11::candidate_name(d, i);
        SCOPED_TRACE("candidate " + name);
        setenv("FA_STEP11_CONFIG", name.c_str(), 1);  // bypasses the tuner (kernel.cu, pick())
        for (const Shape& s : {Shape{1, 2, 333, 333, d, true, 0, t}, Shape{2, 2, 300, 1000, d, false, 0, t},
                               Shape{1, 3, 1000, 300, d, true, 0, t}, Shape{1, 2, 1, 77, d, false, 0, t}})
          expect_matches_reference(kStep, s, false);
        unsetenv("FA_STEP11_CONFIG");
      }
}

// The tuner's choice is cached per problem class: a second call of the same class gives the
// same bits (same instance), and a class of another length is tuned on its own.
TEST(Step11TunedForward, TunedChoiceIsStable) {
  for (fa::DType t : kTypes) {
    const Shape s{2, 4, 1024, 1024, 128, false, 0, t};
    const Inputs in = random_inputs(s, fa::fresh_seed());
    const Outputs a = run(kStep, s, in, false), b = run(kStep, s, in, false);
    EXPECT_EQ(a.o, b.o);
    EXPECT_EQ(a.lse, b.lse);
  }
}
}  // namespace
