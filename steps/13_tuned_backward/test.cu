// Step 13 (the tuned backward: template instances picked by the autotuner, staggered atomic dQ)
// against step 12 in the same dtype and variant, and against the fp64 reference, with the per-row
// low-precision rule of harness/tolerance.h (dQ per query row, dK and dV per key row). The shared
// checks of tests/tc_backward_checks.h in both variants, plus what is particular to this step:
// every candidate instance (not only the ones the tuner picks here) in both variants.
#include <cstdlib>

#include "tc_backward_checks.h"

namespace step12 {
const fa::StepInfo& info();
}
namespace step13 {
const fa::StepInfo& info();
int candidate_count(int head_dim);
std::string candidate_name(int head_dim, int i);
}  // namespace step13

namespace {
using namespace tc_backward_checks;
const fa::StepInfo& kStep = step13::info();
const fa::StepInfo& kPrev = step12::info();

// Step 12's two variants, the atomic one now the default (the faster of the two here, doc 13).
TEST(Step13TunedBackward, DeclaresItsVariants) {
  ASSERT_EQ(kStep.variants, (std::vector<std::string>{"atomic", "deterministic"}));
}
TEST(Step13TunedBackward, MatchesStep12OnRealisticShapes) {
  for (int variant : kVariants) matches_prev_on_realistic_shapes(kStep, kPrev, variant);
}
TEST(Step13TunedBackward, MatchesStep12WhenSeqQDiffersFromSeqK) {
  for (int variant : kVariants) matches_prev_when_seq_q_differs_from_seq_k(kStep, kPrev, variant);
}
TEST(Step13TunedBackward, MatchesGoldenInputs) {
  for (fa::DType t : kTypes) expect_matches_golden(kStep, /*backward=*/true, t);
}
TEST(Step13TunedBackward, MatchesFp64OnEdgeShapes) {
  for (int variant : kVariants) matches_fp64_on_edge_shapes(kStep, variant);
}
TEST(Step13TunedBackward, PaddedHeadDims) {
  for (int variant : kVariants) matches_fp64_with_padded_head_dims(kStep, variant);
}
TEST(Step13TunedBackward, RowWithoutVisibleKeysGetsNoGradient) {
  for (int variant : kVariants) row_without_visible_keys_gets_no_gradient(kStep, variant);
}
TEST(Step13TunedBackward, DeterministicVariantIsBitwiseReproducible) {
  deterministic_variant_is_bitwise_reproducible(kStep);
}
TEST(Step13TunedBackward, WorkspaceIsDeltaPlusTheAtomicAccumulator) {
  workspace_is_delta_plus_the_atomic_accumulator(kStep);
}
// GQA: the forward (step 11's) and the backward in both variants, dK and dV summed over each group.
TEST(Step13TunedBackward, GroupedKvHeadsMatchFp64) {
  grouped_kv_heads_match_fp64_and_repeated_mha(kStep);
  for (int variant : kVariants) grouped_kv_heads_match_fp64_backward(kStep, variant);
}
TEST(Step13TunedBackward, RefusesWhatItCannotRun) { refuses_what_it_cannot_run_backward(kStep); }

// Every candidate pinned (FA_STEP13_CONFIG bypasses the tuner), both variants, against fp64 on
// shapes that take the masked, unmasked, ragged and staggered paths (seq 333: 6 query tiles, so an
// atomic key block's unmasked tiles start at a rotated one), and against step 12 on a longer one.
TEST(Step13TunedBackward, EveryCandidateMatchesFp64AndStep12) {
  for (int variant : kVariants)
    for (fa::DType t : kTypes)
      for (int d : {64, 128})
        for (int i = 0; i < step13::candidate_count(d); ++i) {
          const std::string name = step13::candidate_name(d, i);
          SCOPED_TRACE("candidate " + name);
          setenv("FA_STEP13_CONFIG", name.c_str(), 1);
          for (const Shape& s : {Shape{1, 2, 333, 333, d, true, 0, t}, Shape{2, 2, 300, 1000, d, false, 0, t},
                                 Shape{1, 3, 1000, 300, d, true, 0, t}, Shape{1, 2, 1, 77, d, false, 0, t}})
            expect_matches_fp64(kStep, s, variant);
          expect_matches_prev(kStep, kPrev, {1, 4, 1100, 1100, d, variant == 0, 0, t}, variant);
          unsetenv("FA_STEP13_CONFIG");
        }
}
}  // namespace
