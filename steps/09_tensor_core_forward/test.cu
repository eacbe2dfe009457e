// Step 09 (tensor-core forward, fp16 and bf16) against step 06 run in fp32 on the same rounded
// inputs, and against the fp64 reference, with the per-row low-precision rule of
// harness/tolerance.h (2·max|ref_lowp − ref| + 1 ulp per query row; LSE to fp32 tolerance).
// The shared checks of tests/tensor_core_checks.h (both dtypes, both head-dim instances, causal
// and not, ragged lengths, seq_q ≠ seq_k both ways, padded head dims, what it refuses), plus what
// is particular to this step.
#include "tensor_core_checks.h"

namespace step06 {
const fa::StepInfo& info();
}
namespace step09 {
const fa::StepInfo& info();
}

namespace {
using namespace tensor_core_checks;
const fa::StepInfo& kStep = step09::info();
const fa::StepInfo& kPrev = step06::info();

TEST(Step09TensorCoreForward, MatchesStep06OnRealisticShapes) { matches_prev_on_realistic_shapes(kStep, kPrev); }
TEST(Step09TensorCoreForward, MatchesStep06WhenSeqQDiffersFromSeqK) {
  matches_prev_when_seq_q_differs_from_seq_k(kStep, kPrev);
}
TEST(Step09TensorCoreForward, MatchesGoldenInputs) { matches_golden_inputs(kStep); }
TEST(Step09TensorCoreForward, MatchesFp64OnEdgeShapes) { matches_fp64_on_edge_shapes(kStep); }
TEST(Step09TensorCoreForward, PaddedHeadDims) { matches_fp64_with_padded_head_dims(kStep); }
TEST(Step09TensorCoreForward, LongSequenceMatchesFp64) { matches_fp64_on_a_long_sequence(kStep); }
TEST(Step09TensorCoreForward, RefusesWhatItCannotRun) { refuses_what_it_cannot_run(kStep); }
}  // namespace
