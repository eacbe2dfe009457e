// Step 10 (swizzled shared memory, cp.async K/V pipeline, exp2) against step 09 in the same
// dtype, and against the fp64 reference, with the per-row low-precision rule of
// harness/tolerance.h (2·max|ref_lowp − ref| + 1 ulp per query row; LSE to fp32 tolerance).
// The shared checks of tests/tensor_core_checks.h (both dtypes, both head-dim instances, causal
// and not, ragged lengths, seq_q ≠ seq_k both ways, padded head dims, what it refuses), plus what
// is particular to this step.
#include "tensor_core_checks.h"

namespace step10 {
const fa::StepInfo& info();
}
namespace step09 {
const fa::StepInfo& info();
}

namespace {
using namespace tensor_core_checks;
const fa::StepInfo& kStep = step10::info();
const fa::StepInfo& kPrev = step09::info();

TEST(Step10SwizzlePipelineForward, MatchesStep09OnRealisticShapes) { matches_prev_on_realistic_shapes(kStep, kPrev); }
TEST(Step10SwizzlePipelineForward, MatchesStep09WhenSeqQDiffersFromSeqK) {
  matches_prev_when_seq_q_differs_from_seq_k(kStep, kPrev);
}
TEST(Step10SwizzlePipelineForward, MatchesGoldenInputs) { matches_golden_inputs(kStep); }
TEST(Step10SwizzlePipelineForward, MatchesFp64OnEdgeShapes) { matches_fp64_on_edge_shapes(kStep); }
TEST(Step10SwizzlePipelineForward, PaddedHeadDims) { matches_fp64_with_padded_head_dims(kStep); }
TEST(Step10SwizzlePipelineForward, LongSequenceMatchesFp64) { matches_fp64_on_a_long_sequence(kStep); }
// 2048 key tiles for one block of query rows, the harness's large-score row among them: the rescale factor must
// be exactly 1 while a row's max holds, or its rounding compounds once per tile into the LSE (lesson 10).
TEST(Step10SwizzlePipelineForward, ManyKeyTilesKeepTheLse) {
  for (fa::DType t : kTypes) expect_matches_reference(kStep, {1, 1, 16, 131072, 128, false, 0, t}, false);
}
TEST(Step10SwizzlePipelineForward, RefusesWhatItCannotRun) { refuses_what_it_cannot_run(kStep); }

// exp2 folds the scale into the max: the scale must be positive, and any positive one works.
TEST(Step10SwizzlePipelineForward, OtherScales) {
  for (fa::DType t : kTypes)
    for (double scale : {0.01, 0.5, 2.0}) expect_matches_reference(kStep, {1, 2, 200, 300, 64, true, scale, t}, false);
  fa::Problem pr;
  pr.family = fa::Family::Attention;
  pr.attn.dtype = fa::DType::F16;
  pr.attn.scale = -0.1f;
  EXPECT_NE(fa::step_supports(kStep, pr), "") << "negative scale";
}
}  // namespace
