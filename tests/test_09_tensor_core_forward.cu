// Step 09 (tensor-core forward, fp16 and bf16) against step 06 run in fp32 on the same rounded
// inputs, and against the fp64 reference, with the per-row low-precision rule of
// common/tolerance.h (2·max|ref_lowp − ref| + 1 ulp per query row; LSE to fp32 tolerance).
// Both dtypes, both head-dim instances, causal and not, lengths that are multiples of neither
// tile, seq_q ≠ seq_k both ways, padded head dims, and what it refuses.
#include "attention_checks.h"

namespace step06 {
const fa::StepInfo& info();
}
namespace step09 {
const fa::StepInfo& info();
}

namespace {
using namespace attention_checks;
const fa::StepInfo& kStep = step09::info();
const fa::StepInfo& kPrev = step06::info();
constexpr fa::DType kTypes[] = {fa::DType::F16, fa::DType::BF16};

TEST(Step09TensorCoreForward, MatchesStep06OnRealisticShapes) {
  for (fa::DType t : kTypes)
    for (int d : {64, 128})
      for (bool causal : {false, true}) expect_matches_step(kStep, kPrev, {2, 4, 1024, 1024, d, causal, 0, t}, false);
}

TEST(Step09TensorCoreForward, MatchesStep06WhenSeqQDiffersFromSeqK) {
  for (fa::DType t : kTypes)
    for (int d : {64, 128})
      for (auto [sq, sk] : {std::pair{300, 1000}, std::pair{1000, 300}, std::pair{777, 513}, std::pair{129, 1000}})
        expect_matches_step(kStep, kPrev, {1, 3, sq, sk, d, sq < sk, 0, t}, false);
}

TEST(Step09TensorCoreForward, MatchesGoldenInputs) {
  for (fa::DType t : kTypes) expect_matches_golden(kStep, /*backward=*/false, t);
}

TEST(Step09TensorCoreForward, MatchesFp64OnEdgeShapes) {
  for (fa::DType t : kTypes)
    for (int d : {64, 128})
      for (Shape s : edge_shapes(d)) {
        s.dtype = t;
        expect_matches_reference(kStep, s, /*backward=*/false);
      }
}

// head_dim below its instance runs with zero-padded columns; a scale other than 1/sqrt(d).
TEST(Step09TensorCoreForward, PaddedHeadDims) {
  for (fa::DType t : kTypes) {
    expect_matches_reference(kStep, {1, 2, 50, 70, 40, true, 0.3, t}, false);
    expect_matches_reference(kStep, {2, 1, 33, 33, 8, false, 0, t}, false);
    expect_matches_reference(kStep, {1, 2, 130, 90, 96, true, 0, t}, false);
  }
}

// One long head: 64 key tiles of online rescaling, the large row included.
TEST(Step09TensorCoreForward, LongSequenceMatchesFp64) {
  for (fa::DType t : kTypes) expect_matches_reference(kStep, {1, 1, 4096, 4096, 64, true, 0, t}, false);
}

TEST(Step09TensorCoreForward, RefusesWhatItCannotRun) {
  fa::Problem pr;
  pr.family = fa::Family::Attention;
  pr.attn.dtype = fa::DType::F32;
  EXPECT_NE(kStep.supports(pr), "") << "fp32";
  pr.attn.dtype = fa::DType::F16;
  EXPECT_EQ(kStep.supports(pr), "");
  for (int d : {4, 66, 136, 256}) {
    pr.attn.head_dim = d;
    EXPECT_NE(kStep.supports(pr), "") << "head_dim " << d;
  }
}
}  // namespace
