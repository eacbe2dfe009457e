// Step 18 (the warp-specialised Hopper forward; sm_90a) against step 17 in the same dtype, and
// against the fp64 reference with the per-row low-precision rule of harness/tolerance.h. The shared
// checks of tests/tensor_core_checks.h (both dtypes, both head-dim instances, causal and not, ragged
// lengths, seq_q ≠ seq_k both ways, padded head dims, what it refuses), plus what is particular to
// this step: every ablation variant computes the same attention (the rescale skip to the bit), and a
// persistent block that walks many tiles (more tiles than SMs, causal groups of heads, ragged ends) restarts its state per tile.
#include <cstring>

#include "tensor_core_checks.h"

namespace step17 {
const fa::StepInfo& info();
}
namespace step18 {
const fa::StepInfo& info();
}

namespace {
using namespace tensor_core_checks;
const fa::StepInfo& kStep = step18::info();
const fa::StepInfo& kPrev = step17::info();

TEST(Step18WarpSpecialized, MatchesStep17OnRealisticShapes) { matches_prev_on_realistic_shapes(kStep, kPrev); }
TEST(Step18WarpSpecialized, MatchesStep17WhenSeqQDiffersFromSeqK) {
  matches_prev_when_seq_q_differs_from_seq_k(kStep, kPrev);
}
TEST(Step18WarpSpecialized, MatchesGoldenInputs) { matches_golden_inputs(kStep); }
TEST(Step18WarpSpecialized, MatchesFp64OnEdgeShapes) { matches_fp64_on_edge_shapes(kStep); }
TEST(Step18WarpSpecialized, PaddedHeadDims) { matches_fp64_with_padded_head_dims(kStep); }
TEST(Step18WarpSpecialized, LongSequenceMatchesFp64) { matches_fp64_on_a_long_sequence(kStep); }
TEST(Step18WarpSpecialized, GroupedKvHeadsMatchFp64AndRepeatedMha) { grouped_kv_heads_match_fp64_and_repeated_mha(kStep); }
TEST(Step18WarpSpecialized, RefusesWhatItCannotRun) { refuses_what_it_cannot_run(kStep); }

// Against fp64 on fresh inputs, in variant `variant` (AttnParams::variant), every output NaN-poisoned.
void expect_variant_matches_fp64(const Shape& s, int variant) {
  const std::uint64_t seed = fa::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed) + ", variant " + kStep.variants.at(variant));
  const Inputs in = random_inputs(s, seed);
  fa::AttnParams p = s.params();
  p.variant = variant;
  fa::attention::Run r(kStep, p, false, in);
  expect_close_lowp_to_fp64(fa::attention::run_checked(r, false), s, in, false, "fp64");
}

// Each technique switched off (doc 18's ablation) leaves the result within the same bounds: the
// variants differ in who waits for whom, not in the arithmetic.
TEST(Step18WarpSpecialized, EveryVariantMatchesFp64) {
  ASSERT_EQ(kStep.variants.size(), 9u);
  for (int v = 0; v < int(kStep.variants.size()); ++v)
    for (fa::DType t : kTypes)
      for (int d : {64, 128})
        for (bool causal : {false, true}) expect_variant_matches_fp64({2, 3, 333, 300, d, causal, 0, t}, v);
}

// The full step against variant `name` on shape s, fresh inputs: the same bits in O and LSE.
void expect_same_bits_as_variant(const char* name, const Shape& s) {
  int other = -1;
  for (int v = 0; v < int(kStep.variants.size()); ++v)
    if (kStep.variants[v] == name) other = v;
  ASSERT_GE(other, 0) << name;
  const std::uint64_t seed = fa::fresh_seed();
  SCOPED_TRACE(s.str() + ", seed " + std::to_string(seed) + ", against " + name);
  const Inputs in = random_inputs(s, seed);
  fa::attention::Outputs out[2];
  for (int k = 0; k < 2; ++k) {
    fa::AttnParams p = s.params();
    p.variant = k == 0 ? 0 : other;
    fa::attention::Run r(kStep, p, false, in);
    out[k] = fa::attention::run_checked(r, false);
  }
  ASSERT_EQ(out[0].o.size(), out[1].o.size());
  ASSERT_EQ(out[0].lse.size(), out[1].lse.size());
  EXPECT_EQ(std::memcmp(out[0].o.data(), out[1].o.data(), out[0].o.size() * sizeof(float)), 0) << "O differs";
  EXPECT_EQ(std::memcmp(out[0].lse.data(), out[1].lse.data(), out[0].lse.size() * sizeof(float)), 0) << "LSE differs";
}

// At d 64 the rescale of O is skipped when alpha = 1 for every row of the warp; multiplying by 1
// changes no bit, so the step with and without the skip gives the same bits in O and LSE. Long
// rows (many K/V tiles, most of them skipped) and ragged ends; both dtypes, causal and not.
TEST(Step18WarpSpecialized, RescaleSkipChangesNoBit) {
  for (fa::DType t : kTypes)
    for (bool causal : {false, true})
      expect_same_bits_as_variant("no-rescale-skip", {1, 4, 1500, 1700, 64, causal, 0, t});
}

// A consumer skips the key tiles wholly masked for its rows. Computed, such a tile has P = 0 and
// moves no row max (alpha = 1), so skipping it changes no bit either. Causal, d 64 (query blocks of
// 192 rows over 128-key tiles: a skipped tile in most blocks) with seq_q above, equal to and below
// seq_k, ragged ends; d 128 (128-row blocks: nothing to skip on the diagonal). Rows all past seq_q
// (the consumer skips every tile, and its O and LSE are not stored): 1000 and 50 rows at d 64 leave
// two consumers of the last block without rows, 1050 at d 128 one, causal or not.
TEST(Step18WarpSpecialized, MaskedSkipChangesNoBit) {
  for (fa::DType t : kTypes) {
    for (const Shape& s : {Shape{1, 4, 1500, 1700, 64, true, 0, t}, Shape{2, 3, 1000, 1000, 64, true, 0, t},
                           Shape{1, 2, 900, 500, 64, true, 0, t}, Shape{1, 2, 700, 1000, 128, true, 0, t},
                           Shape{2, 3, 1000, 1000, 64, false, 0, t}, Shape{1, 2, 50, 300, 64, false, 0, t},
                           Shape{1, 2, 1050, 900, 128, false, 0, t}, Shape{1, 2, 1050, 1100, 128, true, 0, t}})
      expect_same_bits_as_variant("no-masked-skip", s);
  }
}

// More tiles than the H100 has SMs (132): each persistent block walks several tiles of different
// heads and lengths of work, so the barriers' phases carry over from tile to tile; causal, heads are
// grouped and the heaviest query blocks go first. Ragged ends in both lengths.
TEST(Step18WarpSpecialized, PersistentBlocksWalkManyTiles) {
  for (fa::DType t : kTypes)
    for (int d : {64, 128})
      for (bool causal : {false, true}) expect_matches_reference(kStep, {3, 37, 300, 270, d, causal, 0, t}, false);
}

// An unknown variant is refused with a message, not launched.
TEST(Step18WarpSpecialized, UnknownVariantIsRefused) {
  const Shape s{1, 1, 64, 64, 64, false, 0, fa::DType::F16};
  fa::AttnParams p = s.params();
  p.variant = int(kStep.variants.size());
  EXPECT_THROW(
      {
        fa::attention::Run r(kStep, p, false, random_inputs(s, 1));
        r.forward(nullptr);
      },
      fa::UsageError);
}
}  // namespace
