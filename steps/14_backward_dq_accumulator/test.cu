// Step 14 (dQ_accum in fragment order, staggered starts) against step 13 in the same dtype (its atomic variant) and
// against the fp64 reference, with the per-row low-precision rule of harness/tolerance.h (dQ per query row, dK and dV
// per key row): the shared checks of tests/tc_backward_checks.h, every candidate instance pinned.
#include "tc_backward_checks.h"

namespace step13 {
const fa::StepInfo& info();
}
namespace step14 {
const fa::StepInfo& info();
int candidate_count(int head_dim);
std::string candidate_name(int head_dim, int i);
}  // namespace step14

namespace {
using namespace tc_backward_checks;
const fa::StepInfo& kStep = step14::info();
const fa::StepInfo& kPrev = step13::info();
const Candidates kCandidates{step14::candidate_count, step14::candidate_name, "FA_STEP14_CONFIG"};
constexpr int kAtomic = 0;  // the step's one variant

TEST(Step14BackwardDqAccumulator, DeclaresItsVariant) {
  ASSERT_EQ(kStep.variants, (std::vector<std::string>{"atomic"}));
}
TEST(Step14BackwardDqAccumulator, MatchesStep13OnRealisticShapes) {
  matches_prev_on_realistic_shapes(kStep, kPrev, kAtomic);
}
TEST(Step14BackwardDqAccumulator, MatchesStep13WhenSeqQDiffersFromSeqK) {
  matches_prev_when_seq_q_differs_from_seq_k(kStep, kPrev, kAtomic);
}
TEST(Step14BackwardDqAccumulator, MatchesGoldenInputs) {
  for (fa::DType t : kTypes) expect_matches_golden(kStep, /*backward=*/true, t);
}
TEST(Step14BackwardDqAccumulator, MatchesFp64OnEdgeShapes) { matches_fp64_on_edge_shapes(kStep, kAtomic); }
TEST(Step14BackwardDqAccumulator, PaddedHeadDims) { matches_fp64_with_padded_head_dims(kStep, kAtomic); }
TEST(Step14BackwardDqAccumulator, RowWithoutVisibleKeysGetsNoGradient) {
  row_without_visible_keys_gets_no_gradient(kStep, kAtomic);
}
TEST(Step14BackwardDqAccumulator, DqAccumHoldsWholeTiles) { dq_accum_holds_whole_tiles(kStep); }
// GQA: the forward (step 11's) and the backward, dK and dV summed over each group.
TEST(Step14BackwardDqAccumulator, GroupedKvHeadsMatchFp64) {
  grouped_kv_heads_match_fp64_and_repeated_mha(kStep);
  grouped_kv_heads_match_fp64_backward(kStep, kAtomic);
}
TEST(Step14BackwardDqAccumulator, RefusesWhatItCannotRun) { refuses_what_it_cannot_run_backward(kStep); }
TEST(Step14BackwardDqAccumulator, EveryCandidateMatchesFp64AndStep13) {
  every_candidate_matches_fp64_and_prev(kStep, kPrev, kCandidates, kAtomic);
}
}  // namespace
