// Step 12 (the backward on tensor cores, fp16/bf16) against step 08 (the fp32 backward, run on the
// same rounded inputs) on realistic shapes, and against the fp64 reference on the golden inputs,
// the edge shapes and padded head dims, with the per-row low-precision rule of harness/tolerance.h
// (dQ per query row, dK and dV per key row). Both ways of producing dQ (AttnParams::variant: 0
// deterministic, 1 atomic) run every comparison (tests/tc_backward_checks.h); the deterministic
// one must give the same bits run after run. A row without visible keys gets no gradient and no
// NaN; what the step refuses.
#include "tc_backward_checks.h"

namespace step08 {
const fa::StepInfo& info();
}
namespace step12 {
const fa::StepInfo& info();
}

namespace {
using namespace tc_backward_checks;
const fa::StepInfo& kStep = step12::info();
const fa::StepInfo& kPrev = step08::info();

TEST(Step12TensorCoreBackward, DeclaresItsVariants) {
  ASSERT_EQ(kStep.variants, (std::vector<std::string>{"deterministic", "atomic"}));
}
TEST(Step12TensorCoreBackward, MatchesStep08OnRealisticShapes) {
  for (int variant : kVariants) matches_prev_on_realistic_shapes(kStep, kPrev, variant);
}
// The shared helper of every step's test (variant 0, the default: deterministic).
TEST(Step12TensorCoreBackward, MatchesStep08WithTheSharedCheck) {
  for (fa::DType t : kTypes)
    for (int d : {64, 128}) expect_matches_step(kStep, kPrev, {1, 3, 1000, 999, d, true, 0, t}, true);
}
TEST(Step12TensorCoreBackward, MatchesStep08WhenSeqQDiffersFromSeqK) {
  for (int variant : kVariants) matches_prev_when_seq_q_differs_from_seq_k(kStep, kPrev, variant);
}
TEST(Step12TensorCoreBackward, MatchesGoldenInputs) {
  for (fa::DType t : kTypes) expect_matches_golden(kStep, /*backward=*/true, t);
}
TEST(Step12TensorCoreBackward, MatchesFp64OnEdgeShapes) {
  for (int variant : kVariants) matches_fp64_on_edge_shapes(kStep, variant);
}
TEST(Step12TensorCoreBackward, PaddedHeadDims) {
  for (int variant : kVariants) matches_fp64_with_padded_head_dims(kStep, variant);
}
TEST(Step12TensorCoreBackward, RowWithoutVisibleKeysGetsNoGradient) {
  for (int variant : kVariants) row_without_visible_keys_gets_no_gradient(kStep, variant);
}
TEST(Step12TensorCoreBackward, DeterministicVariantIsBitwiseReproducible) {
  deterministic_variant_is_bitwise_reproducible(kStep);
}
TEST(Step12TensorCoreBackward, WorkspaceIsDeltaPlusTheAtomicAccumulator) {
  workspace_is_delta_plus_the_atomic_accumulator(kStep);
}
TEST(Step12TensorCoreBackward, RefusesWhatItCannotRun) { refuses_what_it_cannot_run_backward(kStep); }
}  // namespace
