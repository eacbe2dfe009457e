// tensor_core_checks.h: the checks every fp16/bf16 forward step runs (09 onwards), each over both
// dtypes and both head-dim instances, so that a step's test file says only which step it tests,
// against which previous step, and what is particular to it. Tolerances: the per-row
// low-precision rule of harness/tolerance.h (2·max|ref_lowp − ref| + 1 ulp per query row; LSE to
// the fp32 tolerance), applied by attention_checks.h.
#pragma once
#include "attention_checks.h"

namespace tensor_core_checks {
using namespace attention_checks;
constexpr fa::DType kTypes[] = {fa::DType::F16, fa::DType::BF16};

// Against the previous step (in fp32 on the same rounded inputs if it has no fp16/bf16 path) on
// realistic shapes, causal and not.
inline void matches_prev_on_realistic_shapes(const fa::StepInfo& step, const fa::StepInfo& prev) {
  for (fa::DType t : kTypes)
    for (int d : {64, 128})
      for (bool causal : {false, true}) expect_matches_step(step, prev, {2, 4, 1024, 1024, d, causal, 0, t}, false);
}

// seq_q ≠ seq_k both ways, lengths that are multiples of neither tile; causal where seq_q < seq_k.
inline void matches_prev_when_seq_q_differs_from_seq_k(const fa::StepInfo& step, const fa::StepInfo& prev) {
  for (fa::DType t : kTypes)
    for (int d : {64, 128})
      for (auto [sq, sk] : {std::pair{300, 1000}, std::pair{1000, 300}, std::pair{777, 513}, std::pair{129, 1000}})
        expect_matches_step(step, prev, {1, 3, sq, sk, d, sq < sk, 0, t}, false);
}

// The golden inputs rounded to each dtype, against fp64 recomputed on them.
inline void matches_golden_inputs(const fa::StepInfo& step) {
  for (fa::DType t : kTypes) expect_matches_golden(step, /*backward=*/false, t);
}

inline void matches_fp64_on_edge_shapes(const fa::StepInfo& step) {
  for (fa::DType t : kTypes)
    for (int d : {64, 128})
      for (Shape s : edge_shapes(d)) {
        s.dtype = t;
        expect_matches_reference(step, s, /*backward=*/false);
      }
}

// head_dim below its instance runs with zero-padded columns; a scale other than 1/sqrt(d).
inline void matches_fp64_with_padded_head_dims(const fa::StepInfo& step) {
  for (fa::DType t : kTypes) {
    expect_matches_reference(step, {1, 2, 50, 70, 40, true, 0.3, t}, false);
    expect_matches_reference(step, {2, 1, 33, 33, 8, false, 0, t}, false);
    expect_matches_reference(step, {1, 2, 130, 90, 96, true, 0, t}, false);
  }
}

// One long head: 64 key tiles of online rescaling, the large row included.
inline void matches_fp64_on_a_long_sequence(const fa::StepInfo& step) {
  for (fa::DType t : kTypes) expect_matches_reference(step, {1, 1, 4096, 4096, 64, true, 0, t}, false);
}

// Grouped-query attention: groups of 2 and 3 query heads per K/V head and MQA (one K/V head),
// ragged lengths, causal and not.
inline std::vector<Shape> grouped_shapes(int d, fa::DType t) {
  return {{2, 8, 200, 333, d, true, 0, t, 4}, {1, 6, 129, 129, d, true, 0, t, 2},
          {1, 6, 300, 77, d, false, 0, t, 2}, {1, 4, 77, 300, d, false, 0, t, 1}};
}

// GQA forward: against fp64 on the grouped shapes; and, to the bit, what the same step gives on the
// MHA problem with each K/V head repeated for every query head of its group (only where a query
// head reads its K and V changed, not what it computes).
inline void grouped_kv_heads_match_fp64_and_repeated_mha(const fa::StepInfo& step) {
  for (fa::DType t : kTypes)
    for (int d : {64, 128}) {
      for (const Shape& s : grouped_shapes(d, t)) expect_matches_reference(step, s, /*backward=*/false);
      for (bool causal : {false, true}) {
        const Shape g{2, 8, 300, 700, d, causal, 0, t, causal ? 2 : 1}, m{2, 8, 300, 700, d, causal, 0, t};
        const std::uint64_t seed = fa::fresh_seed();
        SCOPED_TRACE(g.str() + ", seed " + std::to_string(seed));
        const Inputs in = random_inputs(g, seed);
        const Outputs a = run(step, g, in, false), b = run(step, m, fa::attention::repeat_kv_heads(g.params(), in), false);
        EXPECT_EQ(a.o, b.o) << "O differs from the MHA run on repeated K/V";
        EXPECT_EQ(a.lse, b.lse) << "LSE differs from the MHA run on repeated K/V";
      }
    }
}

// fp32 and head dims that are not a multiple of 8 or above 128 are refused; fp16 is not.
inline void refuses_what_it_cannot_run(const fa::StepInfo& step) {
  fa::Problem pr;
  pr.family = fa::Family::Attention;
  pr.attn.dtype = fa::DType::F32;
  EXPECT_NE(fa::step_supports(step, pr), "") << "fp32";
  pr.attn.dtype = fa::DType::F16;
  EXPECT_EQ(fa::step_supports(step, pr), "");
  for (int d : {4, 66, 136, 256}) {
    pr.attn.head_dim = d;
    EXPECT_NE(fa::step_supports(step, pr), "") << "head_dim " << d;
  }
}

}  // namespace tensor_core_checks
