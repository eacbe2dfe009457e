// Step 21 (the warp-specialised Hopper backward: a TMA producer warp, two consumer warpgroups, a dQ
// writer warp with bulk reductions; sm_90a) against step 20 (its default variant) and against the
// fp64 reference, with the per-row low-precision rule of harness/tolerance.h. The shared checks of
// tests/tc_backward_checks.h, for both variants: realistic shapes, seq_q ≠ seq_k both ways, golden
// inputs, edge shapes (ragged tiles, causal rows past the keys), padded head dims, GQA and MQA, a
// causal row that sees no key (zero gradients, never NaN), and what it refuses.
#include "tc_backward_checks.h"

namespace step20 {
const fa::StepInfo& info();
}
namespace step21 {
const fa::StepInfo& info();
}

namespace {
using namespace tc_backward_checks;
const fa::StepInfo& kStep = step21::info();
const fa::StepInfo& kPrev = step20::info();
constexpr int kFull = 0, kNoWriter = 1, kDeterministic = 2;

TEST(Step21HopperBackwardWs, DeclaresItsVariants) {
  ASSERT_EQ(kStep.variants, (std::vector<std::string>{"full", "no-writer", "deterministic"}));
}
TEST(Step21HopperBackwardWs, MatchesStep20OnRealisticShapes) { matches_prev_on_realistic_shapes(kStep, kPrev, kFull); }
TEST(Step21HopperBackwardWs, MatchesStep20WhenSeqQDiffersFromSeqK) {
  matches_prev_when_seq_q_differs_from_seq_k(kStep, kPrev, kFull);
}
TEST(Step21HopperBackwardWs, MatchesGoldenInputs) {
  for (fa::DType t : kTypes) expect_matches_golden(kStep, /*backward=*/true, t);
}
TEST(Step21HopperBackwardWs, MatchesFp64OnEdgeShapes) { matches_fp64_on_edge_shapes(kStep, kFull); }
TEST(Step21HopperBackwardWs, PaddedHeadDims) { matches_fp64_with_padded_head_dims(kStep, kFull); }
TEST(Step21HopperBackwardWs, GroupedKvHeadsMatchFp64) { grouped_kv_heads_match_fp64_backward(kStep, kFull); }
TEST(Step21HopperBackwardWs, RowWithoutVisibleKeysGetsNoGradient) {
  row_without_visible_keys_gets_no_gradient(kStep, kFull);
}
// The ablation variant (the consumers add dQ themselves, same workspace layout): fp64 on the edge shapes.
TEST(Step21HopperBackwardWs, NoWriterMatchesFp64OnEdgeShapes) { matches_fp64_on_edge_shapes(kStep, kNoWriter); }
// The deterministic variant: right (step 20, fp64 edge shapes), and the same bits run after run on shapes with
// many key blocks per query tile, causal (its descending order) and not. GQA is refused, with a message.
TEST(Step21HopperBackwardWs, DeterministicMatchesStep20AndFp64) {
  matches_prev_on_realistic_shapes(kStep, kPrev, kDeterministic);
  matches_fp64_on_edge_shapes(kStep, kDeterministic);
}
TEST(Step21HopperBackwardWs, DeterministicIsBitwiseRepeatable) { hopper_deterministic_is_bitwise_repeatable(kStep); }
TEST(Step21HopperBackwardWs, DeterministicRefusesGqa) { hopper_deterministic_refuses_gqa(kStep); }
TEST(Step21HopperBackwardWs, RefusesWhatItCannotRun) { refuses_what_it_cannot_run_backward(kStep); }

// dQ_accum holds whole tiles: seq_q rounded up to 64 rows, head_dim to the instance's 64 or 128.
TEST(Step21HopperBackwardWs, WorkspaceHoldsWholeTiles) {
  fa::AttnParams p;
  p.batch = 2, p.heads = 8, p.seq_q = 1000, p.seq_k = 3000, p.head_dim = 72, p.dtype = fa::DType::F16;
  EXPECT_GE(kStep.bwd_workspace_bytes(p), std::size_t(2) * 8 * 1024 * 128 * 4 + std::size_t(2) * 2 * 8 * 1000 * 4);
  p.kv_heads = 2;
  const std::size_t gqa = kStep.bwd_workspace_bytes(p);
  EXPECT_GE(gqa, std::size_t(2) * 8 * 1024 * 128 * 4 + std::size_t(2) * 2 * 2 * 3000 * 72 * 4);
}
}  // namespace
