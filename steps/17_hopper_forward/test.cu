// Step 17 (the Hopper forward: TMA, mbarriers, wgmma; sm_90a) against step 11 in the same dtype,
// and against the fp64 reference with the per-row low-precision rule of harness/tolerance.h. The
// shared checks of tests/tensor_core_checks.h (both dtypes, both head-dim instances, causal and
// not, ragged lengths, seq_q ≠ seq_k both ways, padded head dims, what it refuses), plus what is
// particular to this step: many ragged heads (every head's last box reaching past its end), and a
// tensor that a tensor map cannot describe, refused with a message.
#include <cstdint>

#include "tensor_core_checks.h"
#include "tensor_map.h"

namespace step11 {
const fa::StepInfo& info();
}
namespace step17 {
const fa::StepInfo& info();
}

namespace {
using namespace tensor_core_checks;
const fa::StepInfo& kStep = step17::info();
const fa::StepInfo& kPrev = step11::info();

TEST(Step17HopperForward, MatchesStep11OnRealisticShapes) { matches_prev_on_realistic_shapes(kStep, kPrev); }
TEST(Step17HopperForward, MatchesStep11WhenSeqQDiffersFromSeqK) {
  matches_prev_when_seq_q_differs_from_seq_k(kStep, kPrev);
}
TEST(Step17HopperForward, MatchesGoldenInputs) { matches_golden_inputs(kStep); }
TEST(Step17HopperForward, MatchesFp64OnEdgeShapes) { matches_fp64_on_edge_shapes(kStep); }
TEST(Step17HopperForward, PaddedHeadDims) { matches_fp64_with_padded_head_dims(kStep); }
TEST(Step17HopperForward, LongSequenceMatchesFp64) { matches_fp64_on_a_long_sequence(kStep); }
TEST(Step17HopperForward, GroupedKvHeadsMatchFp64AndRepeatedMha) { grouped_kv_heads_match_fp64_and_repeated_mha(kStep); }
TEST(Step17HopperForward, RefusesWhatItCannotRun) { refuses_what_it_cannot_run(kStep); }

// Many heads of lengths that are not a multiple of a tile: the last box of every head reaches past
// its end, where the 3-D tensor map delivers zeros. (Rows of the next head would not change O
// either, being masked keys and unstored queries: this checks the ragged tiles, not the map's
// third dimension, which doc 17 explains.)
TEST(Step17HopperForward, RaggedHeadsMatchFp64) {
  for (fa::DType t : kTypes)
    for (int d : {64, 128}) expect_matches_reference(kStep, {2, 3, 200, 157, d, false, 0, t}, false);
}

// A tensor map needs a 16-byte aligned address: refused with a message naming the tensor.
TEST(Step17HopperForward, MisalignedTensorIsRefusedWithAMessage) {
  alignas(16) static std::uint16_t host[64];
  try {
    fa::tensor_map_16bit_3d(reinterpret_cast<const char*>(host) + 2, fa::DType::F16, 1, 4, 16, 128, 64, "17_hopper_forward",
                            "Q");
    FAIL() << "a misaligned address was accepted";
  } catch (const fa::UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("Q"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("16 bytes"), std::string::npos) << e.what();
  }
}
}  // namespace
