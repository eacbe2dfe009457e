// Step 26 (step 25 with the softmax backward's elementwise work cut to its arithmetic: exp2 in one
// instruction, the mask only on the tiles it bites; sm_90a) against step 25 (its variant of the same name,
// else its default) and against the fp64 reference, with the per-row low-precision rule of
// harness/tolerance.h. The shared checks of tests/tc_backward_checks.h: realistic shapes, seq_q ≠ seq_k both
// ways, golden inputs, edge shapes (ragged tiles, causal rows past the keys, one query tile and many),
// padded head dims, GQA and MQA, a causal row that sees no key (zero gradients, never NaN), and what it
// refuses. New here: the tiles that take the unmasked path beside those that take the masked one.
#include "tc_backward_checks.h"

namespace step25 {
const fa::StepInfo& info();
}
namespace step26 {
const fa::StepInfo& info();
}

namespace {
using namespace tc_backward_checks;
const fa::StepInfo& kStep = step26::info();
const fa::StepInfo& kPrev = step25::info();
constexpr int kFull = 0, kMaskEveryTile = 1, kDeterministic = 2;

TEST(Step26HopperBackwardLeanSoftmax, DeclaresItsVariants) {
  ASSERT_EQ(kStep.variants, (std::vector<std::string>{"full", "mask-every-tile", "deterministic"}));
}
TEST(Step26HopperBackwardLeanSoftmax, MatchesStep25OnRealisticShapes) { matches_prev_on_realistic_shapes(kStep, kPrev, kFull); }
TEST(Step26HopperBackwardLeanSoftmax, MatchesStep25WhenSeqQDiffersFromSeqK) {
  matches_prev_when_seq_q_differs_from_seq_k(kStep, kPrev, kFull);
}
TEST(Step26HopperBackwardLeanSoftmax, MatchesGoldenInputs) {
  for (fa::DType t : kTypes) expect_matches_golden(kStep, /*backward=*/true, t);
}
TEST(Step26HopperBackwardLeanSoftmax, MatchesFp64OnEdgeShapes) { matches_fp64_on_edge_shapes(kStep, kFull); }
TEST(Step26HopperBackwardLeanSoftmax, PaddedHeadDims) { matches_fp64_with_padded_head_dims(kStep, kFull); }
TEST(Step26HopperBackwardLeanSoftmax, GroupedKvHeadsMatchFp64) { grouped_kv_heads_match_fp64_backward(kStep, kFull); }
TEST(Step26HopperBackwardLeanSoftmax, RowWithoutVisibleKeysGetsNoGradient) {
  row_without_visible_keys_gets_no_gradient(kStep, kFull);
}
// The ablation (every tile through the mask): step 25 (its default) and fp64 on the edge shapes.
TEST(Step26HopperBackwardLeanSoftmax, MaskEveryTileMatchesStep25AndFp64) {
  matches_prev_on_realistic_shapes(kStep, kPrev, kMaskEveryTile);
  matches_fp64_on_edge_shapes(kStep, kMaskEveryTile);
}
// The deterministic variant: right (step 25's deterministic variant, fp64 edge shapes), and the same bits
// run after run on shapes with many key blocks per query tile, causal (its descending order) and not. GQA
// is refused, with a message.
TEST(Step26HopperBackwardLeanSoftmax, DeterministicMatchesStep25AndFp64) {
  matches_prev_on_realistic_shapes(kStep, kPrev, kDeterministic);
  matches_fp64_on_edge_shapes(kStep, kDeterministic);
}
TEST(Step26HopperBackwardLeanSoftmax, DeterministicIsBitwiseRepeatable) { hopper_deterministic_is_bitwise_repeatable(kStep); }
TEST(Step26HopperBackwardLeanSoftmax, DeterministicRefusesGqa) { hopper_deterministic_refuses_gqa(kStep); }
TEST(Step26HopperBackwardLeanSoftmax, RefusesWhatItCannotRun) { refuses_what_it_cannot_run_backward(kStep); }

// Where each path runs: a block whose last keys pass seq_k (seq_k not a multiple of 64, so the last
// consumer's keys are part real, part past the end), causal blocks whose first tiles hold the diagonal and
// whose later tiles do not (seq_q > seq_k, seq_q < seq_k, and one query tile only), and query tiles cut by
// seq_q (rows past it, which only LSE₂ = +inf keeps at zero on the unmasked path). Both head dims, both
// element types, the step and its ablation, against fp64.
TEST(Step26HopperBackwardLeanSoftmax, MaskedAndUnmaskedTilesMatchFp64) {
  for (fa::DType t : kTypes)
    for (int variant : {kFull, kMaskEveryTile})
      for (int d : {64, 128})
        for (const Shape& s : {Shape{1, 2, 300, 200, d, false, 0, t}, Shape{1, 2, 100, 327, d, false, 0, t},
                               Shape{1, 2, 520, 390, d, true, 0, t}, Shape{2, 1, 190, 700, d, true, 0, t},
                               Shape{1, 1, 60, 60, d, true, 0, t}, Shape{1, 2, 383, 383, d, true, 0, t}})
          expect_matches_fp64(kStep, s, variant);
}

// dQ_accum holds whole tiles of both instances: seq_q rounded up to 128 rows, head_dim to 64 or 128, and a
// turn counter per query tile of 64 (d = 128's tile); GQA adds the dK and dV sums.
TEST(Step26HopperBackwardLeanSoftmax, WorkspaceHoldsWholeTiles) {
  fa::AttnParams p;
  p.batch = 2, p.heads = 8, p.seq_q = 1000, p.seq_k = 3000, p.head_dim = 40, p.dtype = fa::DType::F16;
  const std::size_t delta_lse = std::size_t(2) * 2 * 8 * 1000 * 4, turns = std::size_t(2) * 8 * 16 * 4;
  EXPECT_GE(kStep.bwd_workspace_bytes(p), std::size_t(2) * 8 * 1024 * 64 * 4 + turns + delta_lse);
  p.head_dim = 72;
  EXPECT_GE(kStep.bwd_workspace_bytes(p), std::size_t(2) * 8 * 1024 * 128 * 4 + turns + delta_lse);
  p.kv_heads = 2;
  EXPECT_GE(kStep.bwd_workspace_bytes(p),
            std::size_t(2) * 8 * 1024 * 128 * 4 + turns + delta_lse + std::size_t(2) * 2 * 2 * 3000 * 72 * 4);
}
}  // namespace
