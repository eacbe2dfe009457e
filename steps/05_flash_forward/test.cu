// Step 05 (FlashAttention-2 forward, fp32) against step 04 on realistic shapes, causal and not,
// seq_q = seq_k and not, and against the fp64 reference on the golden data and the edge shapes
// of both head-dim instances; head dims below an instance (zero padding); what it refuses.
#include "attention_checks.h"

namespace step04 {
const fa::StepInfo& info();
}
namespace step05 {
const fa::StepInfo& info();
}

namespace {
using namespace attention_checks;
const fa::StepInfo& kStep = step05::info();
const fa::StepInfo& kPrev = step04::info();

TEST(Step05FlashForward, MatchesStep04OnRealisticShapes) {
  for (int d : {64, 128})
    for (bool causal : {false, true}) expect_matches_step(kStep, kPrev, {2, 4, 1024, 1024, d, causal}, false);
}

// Many key tiles against few query blocks and the other way round; lengths that are multiples
// of neither BLOCK_M (128 or 64) nor BLOCK_N (64).
TEST(Step05FlashForward, MatchesStep04WhenSeqQDiffersFromSeqK) {
  expect_matches_step(kStep, kPrev, {1, 4, 300, 1000, 64, true}, false);
  expect_matches_step(kStep, kPrev, {1, 4, 1000, 300, 64, true}, false);
  expect_matches_step(kStep, kPrev, {1, 4, 300, 1000, 128, true}, false);
  expect_matches_step(kStep, kPrev, {1, 4, 1000, 300, 128, true}, false);
  expect_matches_step(kStep, kPrev, {2, 2, 777, 513, 64, false}, false);
  expect_matches_step(kStep, kPrev, {2, 2, 513, 777, 128, false}, false);
}

TEST(Step05FlashForward, MatchesGoldenData) { expect_matches_golden(kStep, /*backward=*/false); }

TEST(Step05FlashForward, MatchesFp64OnEdgeShapes) {
  for (int d : {64, 128})
    for (const Shape& s : edge_shapes(d)) expect_matches_reference(kStep, s, /*backward=*/false);
}

// head_dim below its instance (64 or 128) runs with zero-padded columns.
TEST(Step05FlashForward, PaddedHeadDims) {
  expect_matches_reference(kStep, {1, 2, 50, 70, 40, true, 0.3}, false);
  expect_matches_reference(kStep, {2, 1, 33, 33, 8, false}, false);
  expect_matches_reference(kStep, {1, 2, 130, 90, 100, true}, false);
  expect_matches_reference(kStep, {1, 1, 65, 129, 4, false}, false);
}

// One long head against fp64: 64 key tiles of online rescaling, the large row included.
TEST(Step05FlashForward, LongSequenceMatchesFp64) {
  expect_matches_reference(kStep, {1, 2, 1500, 4096, 64, true}, false);
  expect_matches_reference(kStep, {1, 2, 700, 4096, 128, false}, false);
}

TEST(Step05FlashForward, SupportsOnlyFp32AndHeadDimsUpTo128) {
  fa::Problem pr;
  pr.family = fa::Family::Attention;
  pr.attn.dtype = fa::DType::F16;
  EXPECT_NE(fa::step_supports(kStep, pr), "");
  pr.attn.dtype = fa::DType::BF16;
  EXPECT_NE(fa::step_supports(kStep, pr), "");
  pr.attn.dtype = fa::DType::F32;
  for (int d : {4, 8, 40, 64, 100, 128}) {
    pr.attn.head_dim = d;
    EXPECT_EQ(fa::step_supports(kStep, pr), "") << "head_dim " << d;
  }
  for (int d : {6, 66, 132, 256}) {
    pr.attn.head_dim = d;
    EXPECT_NE(fa::step_supports(kStep, pr), "") << "head_dim " << d;
  }
  pr.attn.head_dim = 64, pr.attn.batch = 300, pr.attn.heads = 300;  // grid.y > 65535
  EXPECT_NE(fa::step_supports(kStep, pr), "");
}

TEST(Step05FlashForward, LauncherRefusesUnsupportedProblems) {
  fa::AttnFwdArgs a{};
  a.p.dtype = fa::DType::F16;
  EXPECT_THROW(kStep.attn_fwd(a, nullptr), fa::UsageError);
  a.p.dtype = fa::DType::F32, a.p.head_dim = 256;
  EXPECT_THROW(kStep.attn_fwd(a, nullptr), fa::UsageError);
}

TEST(Step05FlashForward, NeedsNoWorkspace) { EXPECT_EQ(kStep.fwd_workspace_bytes, nullptr); }
}  // namespace
