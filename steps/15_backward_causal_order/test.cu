// Step 15 (causal heads in groups) against step 14 in the same dtype (its atomic variant) and against the fp64
// reference, with the per-row low-precision rule of harness/tolerance.h (dQ per query row, dK and dV
// per key row): the shared checks of tests/tc_backward_checks.h, every candidate instance pinned.
#include "tc_backward_checks.h"

namespace step14 {
const fa::StepInfo& info();
}
namespace step15 {
const fa::StepInfo& info();
int candidate_count(int head_dim);
std::string candidate_name(int head_dim, int i);
int head_group(const fa::AttnParams& p);
}  // namespace step15

namespace {
using namespace tc_backward_checks;
const fa::StepInfo& kStep = step15::info();
const fa::StepInfo& kPrev = step14::info();
const Candidates kCandidates{step15::candidate_count, step15::candidate_name, "FA_STEP15_CONFIG"};
constexpr int kAtomic = 0;  // the step's one variant

TEST(Step15BackwardCausalOrder, DeclaresItsVariant) { ASSERT_EQ(kStep.variants, (std::vector<std::string>{"atomic"})); }
TEST(Step15BackwardCausalOrder, MatchesStep14OnRealisticShapes) {
  matches_prev_on_realistic_shapes(kStep, kPrev, kAtomic);
}
TEST(Step15BackwardCausalOrder, MatchesStep14WhenSeqQDiffersFromSeqK) {
  matches_prev_when_seq_q_differs_from_seq_k(kStep, kPrev, kAtomic);
}
TEST(Step15BackwardCausalOrder, MatchesGoldenInputs) {
  for (fa::DType t : kTypes) expect_matches_golden(kStep, /*backward=*/true, t);
}
TEST(Step15BackwardCausalOrder, MatchesFp64OnEdgeShapes) { matches_fp64_on_edge_shapes(kStep, kAtomic); }
TEST(Step15BackwardCausalOrder, PaddedHeadDims) { matches_fp64_with_padded_head_dims(kStep, kAtomic); }
TEST(Step15BackwardCausalOrder, RowWithoutVisibleKeysGetsNoGradient) {
  row_without_visible_keys_gets_no_gradient(kStep, kAtomic);
}
TEST(Step15BackwardCausalOrder, DqAccumHoldsWholeTiles) { dq_accum_holds_whole_tiles(kStep); }
TEST(Step15BackwardCausalOrder, CausalHeadGroupsDivideTheHeads) {
  causal_head_groups_divide_the_heads(step15::head_group);
}
// GQA: the forward (step 11's) and the backward, dK and dV summed over each group.
TEST(Step15BackwardCausalOrder, GroupedKvHeadsMatchFp64) {
  grouped_kv_heads_match_fp64_and_repeated_mha(kStep);
  grouped_kv_heads_match_fp64_backward(kStep, kAtomic);
}
TEST(Step15BackwardCausalOrder, RefusesWhatItCannotRun) { refuses_what_it_cannot_run_backward(kStep); }
TEST(Step15BackwardCausalOrder, EveryCandidateMatchesFp64AndStep14) {
  every_candidate_matches_fp64_and_prev(kStep, kPrev, kCandidates, kAtomic);
}
}  // namespace
