// Step 15 (causal heads in groups) against step 14 in the same dtype (its atomic variant) and against the fp64
// reference, with the per-row low-precision rule of harness/tolerance.h (dQ per query row, dK and dV
// per key row): the shared checks of tests/tc_backward_checks.h, plus every candidate instance (not
// only the ones the tuner picks here) pinned in turn.
#include <cuda_runtime.h>

#include <cstdlib>
#include <tuple>

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
// f(dtype, head_dim) with every candidate pinned in turn (FA_STEP15_CONFIG bypasses the tuner).
template <class F>
void each_pinned_candidate(F f) {
  for (fa::DType t : kTypes)
    for (int d : {64, 128})
      for (int i = 0; i < step15::candidate_count(d); ++i) {
        const std::string name = step15::candidate_name(d, i);
        SCOPED_TRACE("candidate " + name);
        setenv("FA_STEP15_CONFIG", name.c_str(), 1);
        f(t, d);
        unsetenv("FA_STEP15_CONFIG");
      }
}
// The workspace: dQ_accum holds whole query tiles of 128 rows and the instance's 64 or 128 columns
// (ragged seq_q and padded head_dim round up), then delta.
TEST(Step15BackwardCausalOrder, DqAccumHoldsWholeTiles) {
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
// The causal order: heads in groups of a power of two that divides batch·K/V heads, the largest with
// group·seq_k <= 16384 (1 where none is); one head at a time without the mask.
TEST(Step15BackwardCausalOrder, CausalHeadGroupsDivideTheHeads) {
  for (int seq : {100, 1024, 2048, 3000, 8192, 16384, 20000})
    for (int batch : {1, 3, 8})
      for (int heads : {1, 6, 16, 17})
        for (bool causal : {false, true}) {
          const Shape s{batch, heads, seq, seq, 64, causal, 0, fa::DType::F16};
          SCOPED_TRACE(s.str());
          const int g = step15::head_group(params(s, 0)), n = batch * heads;
          if (!causal) {
            EXPECT_EQ(g, 1);
            continue;
          }
          EXPECT_TRUE(g >= 1 && (g & (g - 1)) == 0 && n % g == 0) << g;
          EXPECT_TRUE(g == 1 || g * seq <= 16384) << g;
          EXPECT_FALSE(2 * g * seq <= 16384 && n % (2 * g) == 0) << g << ": a larger group fits";
        }
  // GQA: groups of K/V heads (the grouped instance's blocks each walk a K/V head's query heads).
  EXPECT_EQ(step15::head_group(params({1, 8, 1024, 1024, 64, true, 0, fa::DType::F16, 2}, 0)), 2);
}
// GQA: the forward (step 11's) and the backward, dK and dV summed over each group.
TEST(Step15BackwardCausalOrder, GroupedKvHeadsMatchFp64) {
  grouped_kv_heads_match_fp64_and_repeated_mha(kStep);
  grouped_kv_heads_match_fp64_backward(kStep, kAtomic);
}
TEST(Step15BackwardCausalOrder, RefusesWhatItCannotRun) { refuses_what_it_cannot_run_backward(kStep); }

// Every candidate pinned, against fp64 on shapes that take the masked, unmasked and ragged paths
// (seq 333: 6 query tiles), and against step 14 on a longer one.
TEST(Step15BackwardCausalOrder, EveryCandidateMatchesFp64AndStep14) {
  each_pinned_candidate([&](fa::DType t, int d) {
    for (const Shape& s : {Shape{1, 2, 333, 333, d, true, 0, t}, Shape{2, 2, 300, 1000, d, false, 0, t},
                           Shape{1, 3, 1000, 300, d, true, 0, t}, Shape{1, 2, 1, 77, d, false, 0, t}})
      expect_matches_fp64(kStep, s, kAtomic);
    expect_matches_prev(kStep, kPrev, {1, 4, 1100, 1100, d, true, 0, t}, kAtomic);
  });
}
}  // namespace
