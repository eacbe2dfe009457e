// Step 19 (the Hopper forward with ping-pong and the intra-warpgroup overlap; sm_90a) against step 18 in the same dtype, and
// against the fp64 reference with the per-row low-precision rule of harness/tolerance.h. The shared
// checks of tests/tensor_core_checks.h (both dtypes, both head-dim instances, causal and not, ragged
// lengths, seq_q ≠ seq_k both ways, padded head dims, what it refuses), plus those of
// tests/hopper_ws_checks.h: every ablation variant (no-pingpong, no-overlap, no-overlaps, no-masked-skip) computes the same
// attention, and a persistent block that walks many tiles (more tiles than SMs, causal groups of
// heads, ragged ends) restarts its state per tile.
#include "hopper_ws_checks.h"

namespace step18 {
const fa::StepInfo& info();
}
namespace step19 {
const fa::StepInfo& info();
}

namespace {
using namespace hopper_ws_checks;
const fa::StepInfo& kStep = step19::info();
const fa::StepInfo& kPrev = step18::info();

TEST(Step19PingPongOverlap, MatchesStep18OnRealisticShapes) { matches_prev_on_realistic_shapes(kStep, kPrev); }
TEST(Step19PingPongOverlap, MatchesStep18WhenSeqQDiffersFromSeqK) {
  matches_prev_when_seq_q_differs_from_seq_k(kStep, kPrev);
}
TEST(Step19PingPongOverlap, MatchesGoldenInputs) { matches_golden_inputs(kStep); }
TEST(Step19PingPongOverlap, MatchesFp64OnEdgeShapes) { matches_fp64_on_edge_shapes(kStep); }
TEST(Step19PingPongOverlap, PaddedHeadDims) { matches_fp64_with_padded_head_dims(kStep); }
TEST(Step19PingPongOverlap, LongSequenceMatchesFp64) { matches_fp64_on_a_long_sequence(kStep); }
TEST(Step19PingPongOverlap, GroupedKvHeadsMatchFp64AndRepeatedMha) { grouped_kv_heads_match_fp64_and_repeated_mha(kStep); }
TEST(Step19PingPongOverlap, RefusesWhatItCannotRun) { refuses_what_it_cannot_run(kStep); }
TEST(Step19PingPongOverlap, EveryVariantMatchesFp64) { every_variant_matches_fp64(kStep, 5); }
TEST(Step19PingPongOverlap, PersistentBlocksWalkManyTiles) { persistent_blocks_walk_many_tiles(kStep); }
TEST(Step19PingPongOverlap, UnknownVariantIsRefused) { unknown_variant_is_refused(kStep); }
}  // namespace
