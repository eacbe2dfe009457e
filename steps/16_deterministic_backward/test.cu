// Step 16 (the deterministic variant: the atomic adds of step 15, each in its turn) against step 15
// (its atomic variant, the only one it has) and against the fp64 reference, with the per-row
// low-precision rule of harness/tolerance.h (dQ per query row, dK and dV per key row). The shared
// checks of tests/tc_backward_checks.h in both variants, plus what is particular to this step:
// every candidate instance (not only the ones the tuner picks here) in both variants, and the
// deterministic order across the waves of a capped grid.
#include <cuda_runtime.h>

#include <cstdlib>
#include <tuple>
#include <utility>

#include "tc_backward_checks.h"

namespace step15 {
const fa::StepInfo& info();
}
namespace step16 {
const fa::StepInfo& info();
int candidate_count(int head_dim);
std::string candidate_name(int head_dim, int i);
int head_group(const fa::AttnParams& p);
}  // namespace step16

namespace {
using namespace tc_backward_checks;
const fa::StepInfo& kStep = step16::info();
const fa::StepInfo& kPrev = step15::info();

// Two variants: atomic (step 15's, the default, the faster) and deterministic (doc 16).
TEST(Step16DeterministicBackward, DeclaresItsVariants) {
  ASSERT_EQ(kStep.variants, (std::vector<std::string>{"atomic", "deterministic"}));
}
TEST(Step16DeterministicBackward, MatchesStep15OnRealisticShapes) {
  for (int variant : kVariants) matches_prev_on_realistic_shapes(kStep, kPrev, variant);
}
TEST(Step16DeterministicBackward, MatchesStep15WhenSeqQDiffersFromSeqK) {
  for (int variant : kVariants) matches_prev_when_seq_q_differs_from_seq_k(kStep, kPrev, variant);
}
TEST(Step16DeterministicBackward, MatchesGoldenInputs) {
  for (fa::DType t : kTypes) expect_matches_golden(kStep, /*backward=*/true, t);
}
TEST(Step16DeterministicBackward, MatchesFp64OnEdgeShapes) {
  for (int variant : kVariants) matches_fp64_on_edge_shapes(kStep, variant);
}
TEST(Step16DeterministicBackward, PaddedHeadDims) {
  for (int variant : kVariants) matches_fp64_with_padded_head_dims(kStep, variant);
}
TEST(Step16DeterministicBackward, RowWithoutVisibleKeysGetsNoGradient) {
  for (int variant : kVariants) row_without_visible_keys_gets_no_gradient(kStep, variant);
}
TEST(Step16DeterministicBackward, DeterministicVariantIsBitwiseReproducible) {
  deterministic_variant_is_bitwise_reproducible(kStep);
}
// f(dtype, head_dim) with every candidate pinned in turn (FA_STEP16_CONFIG bypasses the tuner).
template <class F>
void each_pinned_candidate(F f) {
  for (fa::DType t : kTypes)
    for (int d : {64, 128})
      for (int i = 0; i < step16::candidate_count(d); ++i) {
        const std::string name = step16::candidate_name(d, i);
        SCOPED_TRACE("candidate " + name);
        setenv("FA_STEP16_CONFIG", name.c_str(), 1);
        f(t, d);
        unsetenv("FA_STEP16_CONFIG");
      }
}
// The workspace: dQ_accum holds whole query tiles of 128 rows and the instance's 64 or 128 columns,
// in fragment order (ragged seq_q and padded head_dim round up), then (deterministic) its turns, one
// per query tile of 64, and next, padded to 16 bytes, then delta.
TEST(Step16DeterministicBackward, DqAccumHoldsWholeTiles) {
  const int atomic = variant_of(kStep, "atomic"), deterministic = variant_of(kStep, "deterministic");
  for (bool causal : {false, true})
    for (auto [seq, d, padded_seq, padded_d] : {std::tuple{1, 8, 128, 64},
                                                {129, 64, 256, 64},
                                                {1000, 40, 1024, 64},
                                                {300, 72, 384, 128},
                                                {2048, 128, 2048, 128}}) {
      const Shape s{2, 3, seq, seq, d, causal, 0, fa::DType::F16};
      SCOPED_TRACE(s.str());
      const std::size_t rows = std::size_t(2) * 3 * seq, tiles = std::size_t(2) * 3 * padded_seq;
      EXPECT_EQ(kStep.bwd_workspace_bytes(params(s, atomic)), tiles * padded_d * 4 + rows * 4);
      EXPECT_EQ(kStep.bwd_workspace_bytes(params(s, deterministic)),
                tiles * padded_d * 4 + ((tiles / 64 + 1) * 4 + 15) / 16 * 16 + rows * 4);
    }
}
// The causal order: heads in groups of a power of two that divides batch·K/V heads, the largest with
// group·seq_k <= 16384 (1 where none is); one head at a time without the mask.
TEST(Step16DeterministicBackward, CausalHeadGroupsDivideTheHeads) {
  for (int seq : {100, 1024, 2048, 3000, 8192, 16384, 20000})
    for (int batch : {1, 3, 8})
      for (int heads : {1, 6, 16, 17})
        for (bool causal : {false, true}) {
          const Shape s{batch, heads, seq, seq, 64, causal, 0, fa::DType::F16};
          SCOPED_TRACE(s.str());
          const int g = step16::head_group(params(s, 0)), n = batch * heads;
          if (!causal) {
            EXPECT_EQ(g, 1);
            continue;
          }
          EXPECT_TRUE(g >= 1 && (g & (g - 1)) == 0 && n % g == 0) << g;
          EXPECT_TRUE(g == 1 || g * seq <= 16384) << g;
          EXPECT_FALSE(2 * g * seq <= 16384 && n % (2 * g) == 0) << g << ": a larger group fits";
        }
  // GQA: groups of K/V heads (the grouped instance's blocks each walk a K/V head's query heads).
  EXPECT_EQ(step16::head_group(params({1, 8, 1024, 1024, 64, true, 0, fa::DType::F16, 2}, 0)), 2);
}
// The deterministic variant's order (kernel.cu, Order) across waves: the persistent grid capped at a
// few blocks (FA_STEP16_WAVE), so that small shapes take many waves, every candidate, against fp64
// and bitwise equal over repeated runs. Shapes: ragged keys; more key blocks than query tiles (ties
// in the order); causal (key blocks taken lightest first, heads in groups); GQA. Then full-size
// shapes with the grid as the GPU holds it. A wrong order hangs or traps (kernel.cu), never passes.
TEST(Step16DeterministicBackward, DeterministicOrderHoldsAcrossWaves) {
  const int deterministic = variant_of(kStep, "deterministic");
  each_pinned_candidate([&](fa::DType t, int d) {
    for (const char* wave : {"1", "3", "8"}) {
      SCOPED_TRACE(std::string("FA_STEP16_WAVE=") + wave);
      setenv("FA_STEP16_WAVE", wave, 1);
      for (const Shape& s : {Shape{1, 3, 700, 900, d, false, 0, t}, Shape{1, 4, 300, 2000, d, false, 0, t},
                             Shape{2, 4, 1000, 1000, d, true, 0, t}, Shape{1, 4, 600, 700, d, true, 0, t, 2}}) {
        expect_matches_fp64(kStep, s, deterministic);
        expect_bitwise_repeatable(kStep, s, deterministic);
      }
      unsetenv("FA_STEP16_WAVE");
    }
  });
  for (fa::DType t : kTypes)
    for (int d : {64, 128})
      for (bool causal : {false, true})
        expect_bitwise_repeatable(kStep, {2, 8, 4096, 4096, d, causal, 0, t}, deterministic);
}
// GQA: the forward (step 11's) and the backward in both variants, dK and dV summed over each group.
TEST(Step16DeterministicBackward, GroupedKvHeadsMatchFp64) {
  grouped_kv_heads_match_fp64_and_repeated_mha(kStep);
  for (int variant : kVariants) grouped_kv_heads_match_fp64_backward(kStep, variant);
}
TEST(Step16DeterministicBackward, RefusesWhatItCannotRun) { refuses_what_it_cannot_run_backward(kStep); }

// Every candidate pinned (FA_STEP16_CONFIG bypasses the tuner), both variants, against fp64 on
// shapes that take the masked, unmasked, ragged and staggered paths (seq 333: 6 query tiles, so an
// atomic key block's unmasked tiles start at a rotated one), and against step 15 on a longer one.
TEST(Step16DeterministicBackward, EveryCandidateMatchesFp64AndStep15) {
  for (int variant : kVariants)
    each_pinned_candidate([&](fa::DType t, int d) {
      for (const Shape& s : {Shape{1, 2, 333, 333, d, true, 0, t}, Shape{2, 2, 300, 1000, d, false, 0, t},
                             Shape{1, 3, 1000, 300, d, true, 0, t}, Shape{1, 2, 1, 77, d, false, 0, t}})
        expect_matches_fp64(kStep, s, variant);
      expect_matches_prev(kStep, kPrev, {1, 4, 1100, 1100, d, variant == 0, 0, t}, variant);
    });
}
}  // namespace
