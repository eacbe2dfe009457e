// Step 11 (tuned forward: template instances + autotuner) against step 10 in the same dtype, and
// against the fp64 reference, with the per-row low-precision rule of
// harness/tolerance.h (2·max|ref_lowp − ref| + 1 ulp per query row; LSE to fp32 tolerance).
// The shared checks of tests/tensor_core_checks.h (both dtypes, both head-dim instances, causal
// and not, ragged lengths, seq_q ≠ seq_k both ways, padded head dims, what it refuses), plus what
// is particular to this step.
#include <cstdlib>

#include "tensor_core_checks.h"

namespace step10 {
const fa::StepInfo& info();
}
namespace step11 {
const fa::StepInfo& info();
int candidate_count(int head_dim);
std::string candidate_name(int head_dim, int i);
}  // namespace step11

namespace {
using namespace tensor_core_checks;
const fa::StepInfo& kStep = step11::info();
const fa::StepInfo& kPrev = step10::info();

TEST(Step11TunedForward, MatchesStep10OnRealisticShapes) { matches_prev_on_realistic_shapes(kStep, kPrev); }
TEST(Step11TunedForward, MatchesStep10WhenSeqQDiffersFromSeqK) {
  matches_prev_when_seq_q_differs_from_seq_k(kStep, kPrev);
}
TEST(Step11TunedForward, MatchesGoldenInputs) { matches_golden_inputs(kStep); }
TEST(Step11TunedForward, MatchesFp64OnEdgeShapes) { matches_fp64_on_edge_shapes(kStep); }
TEST(Step11TunedForward, PaddedHeadDims) { matches_fp64_with_padded_head_dims(kStep); }
TEST(Step11TunedForward, LongSequenceMatchesFp64) { matches_fp64_on_a_long_sequence(kStep); }
TEST(Step11TunedForward, RefusesWhatItCannotRun) { refuses_what_it_cannot_run(kStep); }

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
