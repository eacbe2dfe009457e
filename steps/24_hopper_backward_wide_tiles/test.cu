// Step 24 (step 21 with query tiles of 128 at d = 64, each consumer owning half the queries of dQ;
// step 21 itself at d > 64; sm_90a) against step 21 (the same variant) and against the fp64 reference, with the per-row low-precision rule of harness/tolerance.h. The shared checks of
// tests/tc_backward_checks.h, for both variants: realistic shapes, seq_q ≠ seq_k both ways, golden
// inputs, edge shapes (ragged tiles, causal rows past the keys), padded head dims, GQA and MQA, a
// causal row that sees no key (zero gradients, never NaN), and what it refuses.
#include "tc_backward_checks.h"

namespace step21 {
const fa::StepInfo& info();
}
namespace step24 {
const fa::StepInfo& info();
}

namespace {
using namespace tc_backward_checks;
const fa::StepInfo& kStep = step24::info();
const fa::StepInfo& kPrev = step21::info();
constexpr int kFull = 0, kNoWriter = 1, kDeterministic = 2;

TEST(Step24HopperBackwardWideTiles, DeclaresItsVariants) {
  ASSERT_EQ(kStep.variants, (std::vector<std::string>{"full", "no-writer", "deterministic"}));
}
TEST(Step24HopperBackwardWideTiles, MatchesStep21OnRealisticShapes) { matches_prev_on_realistic_shapes(kStep, kPrev, kFull); }
TEST(Step24HopperBackwardWideTiles, MatchesStep21WhenSeqQDiffersFromSeqK) {
  matches_prev_when_seq_q_differs_from_seq_k(kStep, kPrev, kFull);
}
TEST(Step24HopperBackwardWideTiles, MatchesGoldenInputs) {
  for (fa::DType t : kTypes) expect_matches_golden(kStep, /*backward=*/true, t);
}
TEST(Step24HopperBackwardWideTiles, MatchesFp64OnEdgeShapes) { matches_fp64_on_edge_shapes(kStep, kFull); }
TEST(Step24HopperBackwardWideTiles, PaddedHeadDims) { matches_fp64_with_padded_head_dims(kStep, kFull); }
TEST(Step24HopperBackwardWideTiles, GroupedKvHeadsMatchFp64) { grouped_kv_heads_match_fp64_backward(kStep, kFull); }
TEST(Step24HopperBackwardWideTiles, RowWithoutVisibleKeysGetsNoGradient) {
  row_without_visible_keys_gets_no_gradient(kStep, kFull);
}
// The ablation variant (the consumers add dQ themselves, same workspace layout): fp64 on the edge shapes.
TEST(Step24HopperBackwardWideTiles, NoWriterMatchesFp64OnEdgeShapes) { matches_fp64_on_edge_shapes(kStep, kNoWriter); }
// The deterministic variant: right (step 21's deterministic variant, fp64 edge shapes), and the same bits run after run on shapes with
// many key blocks per query tile, causal (its descending order) and not. GQA is refused, with a message.
TEST(Step24HopperBackwardWideTiles, DeterministicMatchesStep21AndFp64) {
  matches_prev_on_realistic_shapes(kStep, kPrev, kDeterministic);
  matches_fp64_on_edge_shapes(kStep, kDeterministic);
}
TEST(Step24HopperBackwardWideTiles, DeterministicIsBitwiseRepeatable) { hopper_deterministic_is_bitwise_repeatable(kStep); }
TEST(Step24HopperBackwardWideTiles, DeterministicRefusesGqa) { hopper_deterministic_refuses_gqa(kStep); }
TEST(Step24HopperBackwardWideTiles, RefusesWhatItCannotRun) { refuses_what_it_cannot_run_backward(kStep); }

// dQ_accum holds whole tiles at d <= 64: seq_q rounded up to 128 rows, head_dim to 64; at d > 64 the step
// runs step 21, with step 21's workspace.
TEST(Step24HopperBackwardWideTiles, WorkspaceHoldsWholeTiles) {
  fa::AttnParams p;
  p.batch = 2, p.heads = 8, p.seq_q = 1000, p.seq_k = 3000, p.head_dim = 40, p.dtype = fa::DType::F16;
  EXPECT_GE(kStep.bwd_workspace_bytes(p), std::size_t(2) * 8 * 1024 * 64 * 4 + std::size_t(2) * 2 * 8 * 1000 * 4);
  p.kv_heads = 2;
  EXPECT_GE(kStep.bwd_workspace_bytes(p), std::size_t(2) * 8 * 1024 * 64 * 4 + std::size_t(2) * 2 * 2 * 3000 * 40 * 4);
  p.head_dim = 72;
  EXPECT_EQ(kStep.bwd_workspace_bytes(p), kPrev.bwd_workspace_bytes(p));
}
}  // namespace
