// Step 27 (step 26's backward with dQ added in a fixed order that costs no queue: the rotated walk, work by
// ticket; sm_90a) against step 26 (its variant of the same name, else its default) and against the fp64
// reference, with the per-row low-precision rule of harness/tolerance.h. The shared checks of
// tests/tc_backward_checks.h: realistic shapes, seq_q ≠ seq_k both ways, golden inputs, edge shapes (ragged
// tiles, causal rows past the keys, one query tile and many), padded head dims, a causal row that sees no key
// (zero gradients, never NaN), and what it refuses (GQA too: no variant of this step runs it). New here: the
// same bits run after run on each of the orders the launcher picks (rotated, ascending, causal descending).
#include "launch.h"
#include "tc_backward_checks.h"

namespace step26 {
const fa::StepInfo& info();
}
namespace step27 {
const fa::StepInfo& info();
}

namespace {
using namespace tc_backward_checks;
const fa::StepInfo& kStep = step27::info();
const fa::StepInfo& kPrev = step26::info();
constexpr int kDeterministic = 0, kInOrder = 1, kAnyOrder = 2;

TEST(Step27HopperBackwardDeterministic, DeclaresItsVariants) {
  ASSERT_EQ(kStep.variants, (std::vector<std::string>{"deterministic", "in-order", "any-order"}));
}
TEST(Step27HopperBackwardDeterministic, MatchesStep26OnRealisticShapes) {
  matches_prev_on_realistic_shapes(kStep, kPrev, kDeterministic);
}
TEST(Step27HopperBackwardDeterministic, MatchesStep26WhenSeqQDiffersFromSeqK) {
  matches_prev_when_seq_q_differs_from_seq_k(kStep, kPrev, kDeterministic);
}
TEST(Step27HopperBackwardDeterministic, MatchesGoldenInputs) {
  for (fa::DType t : kTypes) expect_matches_golden(kStep, /*backward=*/true, t);
}
TEST(Step27HopperBackwardDeterministic, MatchesFp64OnEdgeShapes) { matches_fp64_on_edge_shapes(kStep, kDeterministic); }
TEST(Step27HopperBackwardDeterministic, PaddedHeadDims) { matches_fp64_with_padded_head_dims(kStep, kDeterministic); }
TEST(Step27HopperBackwardDeterministic, RowWithoutVisibleKeysGetsNoGradient) {
  row_without_visible_keys_gets_no_gradient(kStep, kDeterministic);
}
// The ablation (the ascending order) and the unordered additions: step 26 and fp64 on the edge shapes.
TEST(Step27HopperBackwardDeterministic, InOrderAndAnyOrderMatchStep26AndFp64) {
  for (int variant : {kInOrder, kAnyOrder}) {
    matches_prev_on_realistic_shapes(kStep, kPrev, variant);
    matches_fp64_on_edge_shapes(kStep, variant);
  }
}
// Bitwise repeatable on every order the launcher picks. Not causal: rotated (as many query tiles as key
// blocks or more: d = 64's tiles of 128 and d = 128's of 64, seq_q above and equal to seq_k), ascending (more
// key blocks than query tiles: seq_k above seq_q; the in-order variant; a head of more key blocks than the GPU
// holds at once, where a rotated block could wait on one that never starts, which the writer's bound on its
// polls would turn into an error). Causal: descending per tile, key blocks taken last first (the shared shapes,
// and the long head).
TEST(Step27HopperBackwardDeterministic, EveryOrderIsBitwiseRepeatable) {
  hopper_deterministic_is_bitwise_repeatable(kStep);
  for (fa::DType t : kTypes)
    for (int d : {64, 128}) {
      for (const Shape& s : {Shape{1, 4, 1024, 1024, d, false, 0, t}, Shape{2, 2, 1000, 600, d, false, 0, t},
                             Shape{1, 2, 300, 1500, d, false, 0, t}})
        expect_bitwise_repeatable(kStep, s, kDeterministic);
      for (bool causal : {false, true})
        expect_bitwise_repeatable(kStep, Shape{1, 4, 1024, 1024, d, causal, 0, t}, kInOrder);
    }
  const int seq = (fa::sm_count() + 1) * 128;  // one key block more than the SMs (one block each)
  for (bool causal : {false, true})
    expect_bitwise_repeatable(kStep, Shape{1, 1, seq, seq, 64, causal, 0, fa::DType::F16}, kDeterministic);
}
TEST(Step27HopperBackwardDeterministic, RefusesWhatItCannotRun) {
  refuses_what_it_cannot_run_backward(kStep);
  for (int variant : {kDeterministic, kInOrder, kAnyOrder}) expect_refuses_gqa(kStep, variant, "no grouped-query attention");
}

// dQ_accum holds whole tiles of both instances: seq_q rounded up to 128 rows, head_dim to 64 or 128, a turn
// counter per query tile of 64 (d = 128's tile) and the ticket.
TEST(Step27HopperBackwardDeterministic, WorkspaceHoldsWholeTiles) {
  fa::AttnParams p;
  p.batch = 2, p.heads = 8, p.seq_q = 1000, p.seq_k = 3000, p.head_dim = 40, p.dtype = fa::DType::F16;
  const std::size_t delta_lse = std::size_t(2) * 2 * 8 * 1000 * 4, turns = std::size_t(2) * 8 * 16 * 4 + 4;
  EXPECT_GE(kStep.bwd_workspace_bytes(p), std::size_t(2) * 8 * 1024 * 64 * 4 + turns + delta_lse);
  p.head_dim = 72;
  EXPECT_GE(kStep.bwd_workspace_bytes(p), std::size_t(2) * 8 * 1024 * 128 * 4 + turns + delta_lse);
}
}  // namespace
