// hopper_ws_checks.h: the checks of the warp-specialised Hopper forward steps (18 and 19) beyond
// tensor_core_checks.h: every ablation variant (StepInfo::variants) computes the same attention, a
// persistent block that walks many tiles restarts its state per tile, and an unknown variant is
// refused. Tolerances: the per-row low-precision rule of harness/tolerance.h, as everywhere.
#pragma once
#include <string>

#include "tensor_core_checks.h"

namespace hopper_ws_checks {
using namespace tensor_core_checks;

// Against fp64 on fresh inputs, in variant `variant` (AttnParams::variant), every output NaN-poisoned.
inline void expect_variant_matches_fp64(const fa::StepInfo& step, const Shape& s, int variant) {
  const std::uint64_t seed = fa::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed) + ", variant " + step.variants.at(variant));
  const Inputs in = random_inputs(s, seed);
  fa::AttnParams p = s.params();
  p.variant = variant;
  fa::attention::Run r(step, p, false, in);
  expect_close_lowp_to_fp64(fa::attention::run_checked(r, false), s, in, false, "fp64");
}

// Each technique switched off (the step's ablation) leaves the result within the same bounds: the
// variants differ in who waits for whom, not in the arithmetic. `count`: the variants the step declares.
inline void every_variant_matches_fp64(const fa::StepInfo& step, std::size_t count) {
  ASSERT_EQ(step.variants.size(), count);
  for (int v = 0; v < int(step.variants.size()); ++v)
    for (fa::DType t : kTypes)
      for (int d : {64, 128})
        for (bool causal : {false, true}) expect_variant_matches_fp64(step, {2, 3, 333, 300, d, causal, 0, t}, v);
}

// More tiles than the H100 has SMs (132): each persistent block walks several tiles of different
// heads and lengths of work, so the barriers' phases carry over from tile to tile; causal, heads are
// grouped and the heaviest query blocks go first. Ragged ends in both lengths.
inline void persistent_blocks_walk_many_tiles(const fa::StepInfo& step) {
  for (fa::DType t : kTypes)
    for (int d : {64, 128})
      for (bool causal : {false, true}) expect_matches_reference(step, {3, 37, 300, 270, d, causal, 0, t}, false);
}

// An unknown variant is refused with a message, not launched.
inline void unknown_variant_is_refused(const fa::StepInfo& step) {
  const Shape s{1, 1, 64, 64, 64, false, 0, fa::DType::F16};
  fa::AttnParams p = s.params();
  p.variant = int(step.variants.size());
  EXPECT_THROW(
      {
        fa::attention::Run r(step, p, false, random_inputs(s, 1));
        r.forward(nullptr);
      },
      fa::UsageError);
}

}  // namespace hopper_ws_checks
