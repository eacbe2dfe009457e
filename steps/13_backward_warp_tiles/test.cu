// Step 13 (2-D warp tiles, the autotuned query tile) against step 12 in the same dtype (its atomic variant) and against
// the fp64 reference, with the per-row low-precision rule of harness/tolerance.h (dQ per query row, dK and dV per key
// row): the shared checks of tests/tc_backward_checks.h, every candidate instance pinned.
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
const Candidates kCandidates{step13::candidate_count, step13::candidate_name, "FA_STEP13_CONFIG"};
constexpr int kAtomic = 0;  // the step's one variant

TEST(Step13BackwardWarpTiles, DeclaresItsVariant) { ASSERT_EQ(kStep.variants, (std::vector<std::string>{"atomic"})); }
TEST(Step13BackwardWarpTiles, MatchesStep12OnRealisticShapes) {
  matches_prev_on_realistic_shapes(kStep, kPrev, kAtomic);
}
TEST(Step13BackwardWarpTiles, MatchesStep12WhenSeqQDiffersFromSeqK) {
  matches_prev_when_seq_q_differs_from_seq_k(kStep, kPrev, kAtomic);
}
TEST(Step13BackwardWarpTiles, MatchesGoldenInputs) {
  for (fa::DType t : kTypes) expect_matches_golden(kStep, /*backward=*/true, t);
}
TEST(Step13BackwardWarpTiles, MatchesFp64OnEdgeShapes) { matches_fp64_on_edge_shapes(kStep, kAtomic); }
TEST(Step13BackwardWarpTiles, PaddedHeadDims) { matches_fp64_with_padded_head_dims(kStep, kAtomic); }
TEST(Step13BackwardWarpTiles, RowWithoutVisibleKeysGetsNoGradient) {
  row_without_visible_keys_gets_no_gradient(kStep, kAtomic);
}
TEST(Step13BackwardWarpTiles, DqAccumHoldsWholeTiles) { dq_accum_holds_whole_tiles(kStep); }
// GQA: the forward (step 11's) and the backward, dK and dV summed over each group.
TEST(Step13BackwardWarpTiles, GroupedKvHeadsMatchFp64) {
  grouped_kv_heads_match_fp64_and_repeated_mha(kStep);
  grouped_kv_heads_match_fp64_backward(kStep, kAtomic);
}
TEST(Step13BackwardWarpTiles, RefusesWhatItCannotRun) { refuses_what_it_cannot_run_backward(kStep); }
TEST(Step13BackwardWarpTiles, EveryCandidateMatchesFp64AndStep12) {
  every_candidate_matches_fp64_and_prev(kStep, kPrev, kCandidates, kAtomic);
}
}  // namespace
