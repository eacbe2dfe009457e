// Step 13 (2-D warp tiles, the autotuned query tile) against step 12 in the same dtype (its atomic variant) and against
// the fp64 reference, with the per-row low-precision rule of harness/tolerance.h (dQ per query row, dK and dV per key
// row): the shared checks of tests/tc_backward_checks.h, plus every candidate instance (not only the ones the tuner
// picks here) pinned in turn.
#include <cuda_runtime.h>

#include <cstdlib>
#include <tuple>

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
// f(dtype, head_dim) with every candidate pinned in turn (FA_STEP13_CONFIG bypasses the tuner).
template <class F>
void each_pinned_candidate(F f) {
  for (fa::DType t : kTypes)
    for (int d : {64, 128})
      for (int i = 0; i < step13::candidate_count(d); ++i) {
        const std::string name = step13::candidate_name(d, i);
        SCOPED_TRACE("candidate " + name);
        setenv("FA_STEP13_CONFIG", name.c_str(), 1);
        f(t, d);
        unsetenv("FA_STEP13_CONFIG");
      }
}
// The workspace: dQ_accum holds whole query tiles of 128 rows and the instance's 64 or 128 columns
// (ragged seq_q and padded head_dim round up), then delta.
TEST(Step13BackwardWarpTiles, DqAccumHoldsWholeTiles) {
  for (bool causal : {false, true})
    for (auto [seq, d, padded_seq, padded_d] : {std::tuple{1, 8, 128, 64},
                                                {129, 64, 256, 64},
                                                {1000, 40, 1024, 64},
                                                {300, 72, 384, 128},
                                                {2048, 128, 2048, 128}}) {
      const Shape s{2, 3, seq, seq, d, causal, 0, fa::DType::F16};
      SCOPED_TRACE(s.str());
      const std::size_t rows = std::size_t(2) * 3 * seq, tiles = std::size_t(2) * 3 * padded_seq;
      EXPECT_EQ(kStep.bwd_workspace_bytes(params(s, kAtomic)), tiles * padded_d * 4 + rows * 4);
    }
}
// GQA: the forward (step 11's) and the backward, dK and dV summed over each group.
TEST(Step13BackwardWarpTiles, GroupedKvHeadsMatchFp64) {
  grouped_kv_heads_match_fp64_and_repeated_mha(kStep);
  grouped_kv_heads_match_fp64_backward(kStep, kAtomic);
}
TEST(Step13BackwardWarpTiles, RefusesWhatItCannotRun) { refuses_what_it_cannot_run_backward(kStep); }

// Every candidate pinned, against fp64 on shapes that take the masked, unmasked and ragged paths
// (seq 333: 6 query tiles), and against step 12 on a longer one.
TEST(Step13BackwardWarpTiles, EveryCandidateMatchesFp64AndStep12) {
  each_pinned_candidate([&](fa::DType t, int d) {
    for (const Shape& s : {Shape{1, 2, 333, 333, d, true, 0, t}, Shape{2, 2, 300, 1000, d, false, 0, t},
                           Shape{1, 3, 1000, 300, d, true, 0, t}, Shape{1, 2, 1, 77, d, false, 0, t}})
      expect_matches_fp64(kStep, s, kAtomic);
    expect_matches_prev(kStep, kPrev, {1, 4, 1100, 1100, d, true, 0, t}, kAtomic);
  });
}
}  // namespace
