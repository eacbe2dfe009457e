// Step 20 (the Hopper backward: TMA, mbarriers, the five products on wgmma; sm_90a) against step 16
// (its atomic variant, step 15's kernel) and against the fp64 reference, with the per-row
// low-precision rule of harness/tolerance.h (dQ per query row, dK and dV per key row). The shared
// checks of tests/tc_backward_checks.h: realistic shapes, seq_q ≠ seq_k both ways, golden inputs,
// edge shapes (ragged tiles, causal rows past the keys), padded head dims, GQA and MQA, a causal row
// that sees no key (zero gradients, never NaN), and what it refuses.
#include "tc_backward_checks.h"

namespace step16 {
const fa::StepInfo& info();
}
namespace step20 {
const fa::StepInfo& info();
}

namespace {
using namespace tc_backward_checks;
const fa::StepInfo& kStep = step20::info();
const fa::StepInfo& kPrev = step16::info();
constexpr int kAtomic = 0, kSplitDims = 1;  // its variants: the default, and d 64's dQ split by dims

TEST(Step20HopperBackward, DeclaresItsVariants) {
  ASSERT_EQ(kStep.variants, (std::vector<std::string>{"atomic", "split-dims"}));
}
TEST(Step20HopperBackward, MatchesStep16OnRealisticShapes) { matches_prev_on_realistic_shapes(kStep, kPrev, kAtomic); }
TEST(Step20HopperBackward, MatchesStep16WhenSeqQDiffersFromSeqK) {
  matches_prev_when_seq_q_differs_from_seq_k(kStep, kPrev, kAtomic);
}
TEST(Step20HopperBackward, MatchesGoldenInputs) {
  for (fa::DType t : kTypes) expect_matches_golden(kStep, /*backward=*/true, t);
}
TEST(Step20HopperBackward, MatchesFp64OnEdgeShapes) { matches_fp64_on_edge_shapes(kStep, kAtomic); }
TEST(Step20HopperBackward, PaddedHeadDims) { matches_fp64_with_padded_head_dims(kStep, kAtomic); }
TEST(Step20HopperBackward, GroupedKvHeadsMatchFp64) { grouped_kv_heads_match_fp64_backward(kStep, kAtomic); }
TEST(Step20HopperBackward, RowWithoutVisibleKeysGetsNoGradient) {
  row_without_visible_keys_gets_no_gradient(kStep, kAtomic);
}
// "split-dims": dQ's m64n32 wgmma (K read from 64 bytes into a swizzle row) at d 64; d 128 is the same kernel.
TEST(Step20HopperBackward, SplitDimsMatchesStep16OnRealisticShapes) {
  matches_prev_on_realistic_shapes(kStep, kPrev, kSplitDims);
}
TEST(Step20HopperBackward, SplitDimsMatchesFp64OnEdgeShapes) { matches_fp64_on_edge_shapes(kStep, kSplitDims); }
TEST(Step20HopperBackward, SplitDimsPaddedHeadDimsAndGqa) {
  matches_fp64_with_padded_head_dims(kStep, kSplitDims);
  grouped_kv_heads_match_fp64_backward(kStep, kSplitDims);
}
TEST(Step20HopperBackward, RefusesWhatItCannotRun) { refuses_what_it_cannot_run_backward(kStep); }

// The workspace holds dQ_accum, delta and LSE₂, and with GQA the dK and dV sums too.
TEST(Step20HopperBackward, WorkspaceGrowsWithGqa) {
  fa::AttnParams p;
  p.batch = 2, p.heads = 8, p.seq_q = 1000, p.seq_k = 3000, p.head_dim = 128, p.dtype = fa::DType::F16;
  const std::size_t mha = kStep.bwd_workspace_bytes(p);
  EXPECT_GE(mha, std::size_t(2) * 8 * 1000 * (128 + 2) * 4);
  p.kv_heads = 2;
  EXPECT_GE(kStep.bwd_workspace_bytes(p), mha + std::size_t(2) * 2 * 2 * 3000 * 128 * 4);
}
}  // namespace
