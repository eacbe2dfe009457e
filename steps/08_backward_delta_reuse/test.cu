// Step 08 (delta computed once by a preprocess kernel) against step 07: causal and not, odd
// lengths, seq_q != seq_k both ways, both head-dim instances; bit for bit (the same delta, the
// same products in the same order). Against fp64 on the golden data and the edge shapes; a row
// without visible keys; the workspace is one float per query row.
#include "attention_checks.h"

namespace step07 {
const fa::StepInfo& info();
}
namespace step08 {
const fa::StepInfo& info();
}

namespace {
using namespace attention_checks;
const fa::StepInfo& kStep = step08::info();
const fa::StepInfo& kPrev = step07::info();

TEST(Step08BackwardDeltaReuse, MatchesStep07) {
  for (int d : {64, 128})
    for (bool causal : {false, true}) {
      expect_matches_step(kStep, kPrev, {2, 4, 1024, 1024, d, causal}, true);
      expect_matches_step(kStep, kPrev, {1, 3, 1000, 999, d, causal}, true);
      expect_matches_step(kStep, kPrev, {1, 2, 300, 1000, d, causal}, true);
      expect_matches_step(kStep, kPrev, {1, 2, 1000, 300, d, causal}, true);
    }
}

// Where delta comes from changes, its value does not: step 07 summed each row's products in the
// same order (per thread a float4, then a butterfly over the row's lanes), so every output is
// expected to be identical, not merely close.
TEST(Step08BackwardDeltaReuse, IdenticalToStep07) {
  for (int d : {64, 128})
    for (const Shape& s : {Shape{1, 2, 257, 130, d, true}, Shape{2, 1, 190, 333, d, false}}) {
      const std::uint64_t seed = fa::fresh_seed();
      SCOPED_TRACE("seed " + std::to_string(seed));
      const Inputs in = random_inputs(s, seed);
      const Outputs a = run(kStep, s, in, true), b = run(kPrev, s, in, true);
      for (auto [name, x, y] :
           {std::tuple{"dQ", &a.dq, &b.dq}, std::tuple{"dK", &a.dk, &b.dk}, std::tuple{"dV", &a.dv, &b.dv}}) {
        std::size_t differ = 0;
        for (std::size_t i = 0; i < x->size(); ++i) differ += !((*x)[i] == (*y)[i]);
        EXPECT_EQ(differ, 0u) << s.str() << " " << name << ": elements that differ from step 07";
      }
    }
}

TEST(Step08BackwardDeltaReuse, MatchesGoldenData) { expect_matches_golden(kStep, /*backward=*/true); }

TEST(Step08BackwardDeltaReuse, MatchesFp64OnEdgeShapes) {
  for (int d : {64, 128})
    for (const Shape& s : edge_shapes(d)) expect_matches_reference(kStep, s, /*backward=*/true);
  expect_matches_reference(kStep, {1, 2, 50, 70, 40, true, 0.3}, true);
  expect_matches_reference(kStep, {1, 2, 130, 90, 100, true}, true);
}

TEST(Step08BackwardDeltaReuse, RowWithoutVisibleKeysGetsNoGradient) {
  for (int d : {64, 128}) {
    expect_row_without_keys_gets_no_gradient(kStep, {1, 2, 130, 150, d, true}, 70);
    expect_row_without_keys_gets_no_gradient(kStep, {1, 2, 130, 150, d, false}, 0);
  }
}

TEST(Step08BackwardDeltaReuse, WorkspaceIsOneFloatPerQueryRow) {
  fa::AttnParams p;
  p.batch = 8, p.heads = 32, p.seq_q = 2048, p.seq_k = 4096, p.head_dim = 64;
  ASSERT_NE(kStep.bwd_workspace_bytes, nullptr);
  EXPECT_EQ(kStep.bwd_workspace_bytes(p), 8ull * 32 * 2048 * 4);
  EXPECT_EQ(kPrev.bwd_workspace_bytes, nullptr);  // step 07 needs none
}

TEST(Step08BackwardDeltaReuse, SupportsWhatStep07Supports) {
  fa::Problem pr;
  pr.family = fa::Family::Attention;
  pr.backward = true;
  for (int d : {8, 64, 66, 128, 256})
    for (fa::DType t : {fa::DType::F32, fa::DType::F16}) {
      pr.attn.head_dim = d, pr.attn.dtype = t;
      EXPECT_EQ(fa::step_supports(kStep, pr), fa::step_supports(kPrev, pr)) << "head_dim " << d;
    }
}
}  // namespace
