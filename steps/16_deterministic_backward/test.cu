// Step 16 (the deterministic variant: the atomic adds of step 15, each in its turn) against step 15
// (its atomic variant, the only one it has) and against the fp64 reference, with the per-row
// low-precision rule of harness/tolerance.h (dQ per query row, dK and dV per key row). The shared
// checks of tests/tc_backward_checks.h in both variants, plus what is particular to this step:
// every candidate instance (not only the ones the tuner picks here) in both variants, and the
// deterministic order across the waves of a capped grid.
#include <cuda_runtime.h>

#include <cstdlib>
#include <tuple>
#include <utility>

#include "tc_backward_checks.h"

namespace step15 {
const fa::StepInfo& info();
}
namespace step16 {
const fa::StepInfo& info();
int candidate_count(int head_dim);
std::string candidate_name(int head_dim, int i);
int head_group(const fa::AttnParams& p);
}  // namespace step16

namespace {
using namespace tc_backward_checks;
const fa::StepInfo& kStep = step16::info();
const fa::StepInfo& kPrev = step15::info();
const Candidates kCandidates{step16::candidate_count, step16::candidate_name, "FA_STEP16_CONFIG"};

// Two variants: atomic (step 15's, the default, the faster) and deterministic (doc 16).
TEST(Step16DeterministicBackward, DeclaresItsVariants) {
  ASSERT_EQ(kStep.variants, (std::vector<std::string>{"atomic", "deterministic"}));
}
TEST(Step16DeterministicBackward, MatchesStep15OnRealisticShapes) {
  for (int variant : kVariants) matches_prev_on_realistic_shapes(kStep, kPrev, variant);
}
TEST(Step16DeterministicBackward, MatchesStep15WhenSeqQDiffersFromSeqK) {
  for (int variant : kVariants) matches_prev_when_seq_q_differs_from_seq_k(kStep, kPrev, variant);
}
TEST(Step16DeterministicBackward, MatchesGoldenInputs) {
  for (fa::DType t : kTypes) expect_matches_golden(kStep, /*backward=*/true, t);
}
TEST(Step16DeterministicBackward, MatchesFp64OnEdgeShapes) {
  for (int variant : kVariants) matches_fp64_on_edge_shapes(kStep, variant);
}
TEST(Step16DeterministicBackward, PaddedHeadDims) {
  for (int variant : kVariants) matches_fp64_with_padded_head_dims(kStep, variant);
}
TEST(Step16DeterministicBackward, RowWithoutVisibleKeysGetsNoGradient) {
  for (int variant : kVariants) row_without_visible_keys_gets_no_gradient(kStep, variant);
}
TEST(Step16DeterministicBackward, DeterministicVariantIsBitwiseReproducible) {
  deterministic_variant_is_bitwise_reproducible(kStep);
}
TEST(Step16DeterministicBackward, DqAccumHoldsWholeTiles) { dq_accum_holds_whole_tiles(kStep); }
TEST(Step16DeterministicBackward, CausalHeadGroupsDivideTheHeads) {
  causal_head_groups_divide_the_heads(step16::head_group);
}
// The deterministic variant's order (kernel.cu, Order) across waves: the persistent grid capped at a
// few blocks (FA_STEP16_WAVE), so that small shapes take many waves, every candidate, against fp64
// and bitwise equal over repeated runs. Shapes: ragged keys; more key blocks than query tiles (ties
// in the order); causal (key blocks taken lightest first, heads in groups); GQA. Then full-size
// shapes with the grid as the GPU holds it. A wrong order hangs or traps (kernel.cu), never passes.
// One test per wave cap, so that the GPU test's shards (tests/CMakeLists.txt) share the work.
static void order_holds_across_waves(const char* wave) {
  const int deterministic = variant_of(kStep, "deterministic");
  each_pinned_candidate(kCandidates, [&](fa::DType t, int d) {
    SCOPED_TRACE(std::string("FA_STEP16_WAVE=") + wave);
    setenv("FA_STEP16_WAVE", wave, 1);
    for (const Shape& s : {Shape{1, 3, 700, 900, d, false, 0, t}, Shape{1, 4, 300, 2000, d, false, 0, t},
                           Shape{2, 4, 1000, 1000, d, true, 0, t}, Shape{1, 4, 600, 700, d, true, 0, t, 2}}) {
      expect_matches_fp64(kStep, s, deterministic);
      expect_bitwise_repeatable(kStep, s, deterministic);
    }
    unsetenv("FA_STEP16_WAVE");
  });
}
TEST(Step16DeterministicBackward, DeterministicOrderHoldsInWavesOfOne) { order_holds_across_waves("1"); }
TEST(Step16DeterministicBackward, DeterministicOrderHoldsInWavesOfThree) { order_holds_across_waves("3"); }
TEST(Step16DeterministicBackward, DeterministicOrderHoldsInWavesOfEight) { order_holds_across_waves("8"); }
TEST(Step16DeterministicBackward, DeterministicOrderHoldsAtFullSize) {
  const int deterministic = variant_of(kStep, "deterministic");
  for (fa::DType t : kTypes)
    for (int d : {64, 128})
      for (bool causal : {false, true})
        expect_bitwise_repeatable(kStep, {2, 8, 4096, 4096, d, causal, 0, t}, deterministic);
}
// GQA: the forward (step 11's) and the backward in both variants, dK and dV summed over each group.
TEST(Step16DeterministicBackward, GroupedKvHeadsMatchFp64) {
  grouped_kv_heads_match_fp64_and_repeated_mha(kStep);
  for (int variant : kVariants) grouped_kv_heads_match_fp64_backward(kStep, variant);
}
TEST(Step16DeterministicBackward, RefusesWhatItCannotRun) { refuses_what_it_cannot_run_backward(kStep); }

// Every candidate pinned, both variants, against fp64 and step 15 (tests/tc_backward_checks.h).
TEST(Step16DeterministicBackward, EveryCandidateMatchesFp64AndStep15) {
  for (int variant : kVariants) every_candidate_matches_fp64_and_prev(kStep, kPrev, kCandidates, variant);
}
}  // namespace
