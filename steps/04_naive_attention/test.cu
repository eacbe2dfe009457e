// Step 04 (naive attention, forward and backward) against the fp64 reference: golden data,
// fresh random edge shapes (head_dim 64 and 128, causal and not, seq_q != seq_k), and the
// refusal of problems whose S and P would not fit.
#include "attention_checks.h"

namespace step04 {
const fa::StepInfo& info();
}

namespace {
using namespace attention_checks;
const fa::StepInfo& kStep = step04::info();

TEST(Step04NaiveAttention, MatchesGoldenData) { expect_matches_golden(kStep, /*backward=*/true); }

TEST(Step04NaiveAttention, ForwardAndBackwardMatchFp64OnEdgeShapes) {
  for (int d : {64, 128})
    for (const Shape& s : edge_shapes(d)) expect_matches_reference(kStep, s, /*backward=*/true);
}

TEST(Step04NaiveAttention, OddHeadDimAndScale) {
  expect_matches_reference(kStep, {1, 2, 50, 70, 40, true, 0.3}, true);
  expect_matches_reference(kStep, {2, 1, 33, 33, 8, false}, true);
}

TEST(Step04NaiveAttention, RealisticShapeMatchesFp64) {
  expect_matches_reference(kStep, {2, 4, 1024, 1024, 64, true}, true);
  expect_matches_reference(kStep, {1, 2, 512, 1000, 128, false}, true);
}

TEST(Step04NaiveAttention, WorkspaceIsSAndP) {
  fa::AttnParams p;
  p.batch = 4, p.heads = 32, p.seq_q = p.seq_k = 16384, p.head_dim = 64;
  // 2 · 4·32·16384² fp32 = 256 GiB: more than any GPU has, so the harness refuses it.
  EXPECT_EQ(kStep.fwd_workspace_bytes(p), 2ull * 4 * 32 * 16384 * 16384 * 4);
}

TEST(Step04NaiveAttention, RejectsLowPrecision) {
  fa::Problem pr;
  pr.family = fa::Family::Attention;
  pr.attn.dtype = fa::DType::F16;
  EXPECT_NE(fa::step_supports(kStep, pr), "");
}
}  // namespace
