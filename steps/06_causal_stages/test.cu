// Step 06 (causal stages) against step 05: causal and non-causal, lengths that are multiples of
// neither tile, and seq_q != seq_k both ways, where the diagonal crosses the key tiles at other
// offsets (seq_q > seq_k: late query blocks see every key; seq_q < seq_k: most key tiles are
// skipped). Against fp64 on the golden data and the edge shapes.
#include "attention_checks.h"

namespace step05 {
const fa::StepInfo& info();
}
namespace step06 {
const fa::StepInfo& info();
}

namespace {
using namespace attention_checks;
const fa::StepInfo& kStep = step06::info();
const fa::StepInfo& kPrev = step05::info();

TEST(Step06CausalStages, MatchesStep05Causal) {
  for (int d : {64, 128}) {
    expect_matches_step(kStep, kPrev, {2, 4, 1024, 1024, d, true}, false);
    expect_matches_step(kStep, kPrev, {1, 3, 1000, 1000, d, true}, false);
  }
}

TEST(Step06CausalStages, MatchesStep05NonCausal) {
  for (int d : {64, 128}) {
    expect_matches_step(kStep, kPrev, {2, 4, 1024, 1024, d, false}, false);
    expect_matches_step(kStep, kPrev, {1, 3, 1000, 999, d, false}, false);
  }
}

// The diagonal at other offsets: seq_q > seq_k (the last query blocks run only unmasked tiles
// plus the ragged end of the keys), seq_q < seq_k (every tile past the block's last row skipped).
TEST(Step06CausalStages, DiagonalAtOtherOffsets) {
  for (int d : {64, 128})
    for (auto [sq, sk] : {std::pair{1000, 300}, std::pair{300, 1000}, std::pair{129, 1000}, std::pair{1000, 129},
                          std::pair{200, 64}, std::pair{64, 200}, std::pair{257, 256}, std::pair{256, 257}})
      expect_matches_step(kStep, kPrev, {1, 2, sq, sk, d, true}, false);
}

TEST(Step06CausalStages, MatchesGoldenData) { expect_matches_golden(kStep, /*backward=*/false); }

TEST(Step06CausalStages, MatchesFp64OnEdgeShapes) {
  for (int d : {64, 128})
    for (const Shape& s : edge_shapes(d)) expect_matches_reference(kStep, s, /*backward=*/false);
  expect_matches_reference(kStep, {1, 2, 1500, 700, 64, true}, false);
  expect_matches_reference(kStep, {1, 2, 700, 1500, 128, true}, false);
  expect_matches_reference(kStep, {1, 2, 50, 70, 40, true, 0.3}, false);
}

TEST(Step06CausalStages, SupportsWhatStep05Supports) {
  fa::Problem pr;
  pr.family = fa::Family::Attention;
  for (int d : {8, 64, 66, 128, 256})
    for (fa::DType t : {fa::DType::F32, fa::DType::F16}) {
      pr.attn.head_dim = d, pr.attn.dtype = t;
      EXPECT_EQ(fa::step_supports(kStep, pr), fa::step_supports(kPrev, pr)) << "head_dim " << d;
    }
}
}  // namespace
