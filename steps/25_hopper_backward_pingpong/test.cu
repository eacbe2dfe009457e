// Step 25 (step 24 with its two consumers taking turns on the tensor cores and dQ issued a tile late, at
// d = 64 on step 24's tile and at d = 128 on step 21's; sm_90a) against step 24 (step 21's kernel at d > 64) (its variant of the same name, else its default: the
// ablation against step 24's full step) and against the fp64 reference, with the per-row low-precision rule of harness/tolerance.h. The shared checks of
// tests/tc_backward_checks.h: realistic shapes, seq_q ≠ seq_k both ways, golden inputs, edge shapes (ragged
// tiles, causal rows past the keys, one query tile and many), padded head dims, GQA and MQA, a causal row
// that sees no key (zero gradients, never NaN), and what it refuses.
#include "tc_backward_checks.h"

namespace step24 {
const fa::StepInfo& info();
}
namespace step25 {
const fa::StepInfo& info();
}

namespace {
using namespace tc_backward_checks;
const fa::StepInfo& kStep = step25::info();
const fa::StepInfo& kPrev = step24::info();
constexpr int kFull = 0, kNoPingpong = 1, kDeterministic = 2;

TEST(Step25HopperBackwardPingpong, DeclaresItsVariants) {
  ASSERT_EQ(kStep.variants, (std::vector<std::string>{"full", "no-pingpong", "deterministic"}));
}
TEST(Step25HopperBackwardPingpong, MatchesStep24OnRealisticShapes) { matches_prev_on_realistic_shapes(kStep, kPrev, kFull); }
TEST(Step25HopperBackwardPingpong, MatchesStep24WhenSeqQDiffersFromSeqK) {
  matches_prev_when_seq_q_differs_from_seq_k(kStep, kPrev, kFull);
}
TEST(Step25HopperBackwardPingpong, MatchesGoldenInputs) {
  for (fa::DType t : kTypes) expect_matches_golden(kStep, /*backward=*/true, t);
}
TEST(Step25HopperBackwardPingpong, MatchesFp64OnEdgeShapes) { matches_fp64_on_edge_shapes(kStep, kFull); }
TEST(Step25HopperBackwardPingpong, PaddedHeadDims) { matches_fp64_with_padded_head_dims(kStep, kFull); }
TEST(Step25HopperBackwardPingpong, GroupedKvHeadsMatchFp64) { grouped_kv_heads_match_fp64_backward(kStep, kFull); }
TEST(Step25HopperBackwardPingpong, RowWithoutVisibleKeysGetsNoGradient) {
  row_without_visible_keys_gets_no_gradient(kStep, kFull);
}
// The ablation (the lagged dQ and the mbarrier exchange, no token): step 24 and fp64 on the edge shapes.
TEST(Step25HopperBackwardPingpong, NoPingpongMatchesStep24AndFp64) {
  matches_prev_on_realistic_shapes(kStep, kPrev, kNoPingpong);
  matches_fp64_on_edge_shapes(kStep, kNoPingpong);
}
// The deterministic variant: right (step 24's deterministic variant, fp64 edge shapes), and the same bits
// run after run on shapes with many key blocks per query tile, causal (its descending order) and not. GQA
// is refused, with a message.
TEST(Step25HopperBackwardPingpong, DeterministicMatchesStep24AndFp64) {
  matches_prev_on_realistic_shapes(kStep, kPrev, kDeterministic);
  matches_fp64_on_edge_shapes(kStep, kDeterministic);
}
TEST(Step25HopperBackwardPingpong, DeterministicIsBitwiseRepeatable) { hopper_deterministic_is_bitwise_repeatable(kStep); }
TEST(Step25HopperBackwardPingpong, DeterministicRefusesGqa) { hopper_deterministic_refuses_gqa(kStep); }
TEST(Step25HopperBackwardPingpong, RefusesWhatItCannotRun) { refuses_what_it_cannot_run_backward(kStep); }

// The turn count and the lagged dQ at their edges: one query tile (no lag: dQ only after the loop), two
// (one lagged, one after), an odd number, and causal blocks that see no query tile at all (seq_q < seq_k,
// so the last key blocks have nothing to do and must hand no turn on).
TEST(Step25HopperBackwardPingpong, TileCountsAtTheEdgesMatchFp64) {
  for (fa::DType t : kTypes)
    for (int variant : {kFull, kNoPingpong})
      for (int d : {64, 128})
        for (const Shape& s : {Shape{1, 2, 100, 300, d, false, 0, t}, Shape{1, 2, 256, 256, d, true, 0, t},
                               Shape{2, 1, 383, 200, d, false, 0, t}, Shape{1, 2, 130, 700, d, true, 0, t}})
          expect_matches_fp64(kStep, s, variant);
}

// dQ_accum holds whole tiles of both instances: seq_q rounded up to 128 rows, head_dim to 64 or 128, and a
// turn counter per query tile of 64 (d = 128's tile); GQA adds the dK and dV sums.
TEST(Step25HopperBackwardPingpong, WorkspaceHoldsWholeTiles) {
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
