// tc_backward_checks.h: the checks every fp16/bf16 backward step with the two ways of producing dQ
// (StepInfo::variants "deterministic" and "atomic"; steps 12 and 13) runs, each in a given variant,
// so that a step's test file says which step it tests, against which previous step, and what is
// particular to it. Tolerances: the per-row low-precision rule of harness/tolerance.h (dQ per query
// row, dK and dV per key row: 2·max|ref_lowp − ref| + 1 ulp, plus what delta from the given 16-bit
// O alone moves), applied by attention_checks.h.
#pragma once
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "tensor_core_checks.h"

namespace tc_backward_checks {
using namespace tensor_core_checks;
constexpr int kVariants[] = {0, 1};  // AttnParams::variant indexes StepInfo::variants (the default first)

// The index of the variant named `name` in `step`'s list (which one is the default differs by step).
inline int variant_of(const fa::StepInfo& step, const std::string& name) {
  for (std::size_t i = 0; i < step.variants.size(); ++i)
    if (step.variants[i] == name) return int(i);
  ADD_FAILURE() << step.name << " has no variant '" << name << "'";
  return 0;
}

// The previous step's variant of the same name, or its default where it has none by that name (the
// atomic-only steps 13-15 before step 16's deterministic variant).
inline int prev_variant(const fa::StepInfo& prev, const std::string& name) {
  for (std::size_t i = 0; i < prev.variants.size(); ++i)
    if (prev.variants[i] == name) return int(i);
  return 0;
}

inline fa::AttnParams params(const Shape& s, int variant) {
  fa::AttnParams p = s.params();
  p.variant = variant;
  return p;
}

// A step's forward and backward in one variant, every output NaN-poisoned first.
inline Outputs run_variant(const fa::StepInfo& step, const Shape& s, const Inputs& in, int variant) {
  fa::attention::Run r(step, params(s, variant), true, in);
  return fa::attention::run_checked(r, true);
}

inline std::string trace(const fa::StepInfo& step, std::uint64_t seed, int variant) {
  return "seed " + std::to_string(seed) + ", variant " + step.variants.at(variant);
}

// Against the previous step on the same (rounded) inputs: in fp32 if it has no fp16/bf16 path (step
// 08), else in the same dtype and, if it has variants, the one of the same name (else its default). O and LSE (the
// forward) and dQ, dK, dV, with the bounds of the fp64 reference and ref_lowp of every row (dQ, dK: plus
// what delta from the previous step's O moves where its forward differs, lowp_bwd_reference_vs_prev).
inline void expect_matches_prev(const fa::StepInfo& step, const fa::StepInfo& prev, const Shape& s, int variant) {
  const std::uint64_t seed = fa::fresh_seed();
  SCOPED_TRACE(trace(step, seed, variant));
  const Inputs in = random_inputs(s, seed);
  Shape ps = s;
  if (!fa::step_supports(prev, s.problem()).empty()) ps.dtype = fa::DType::F32;
  ASSERT_EQ(fa::step_supports(prev, ps.problem()), "") << prev.name << " runs neither " << s.str() << " nor in fp32";
  const Outputs want = prev.variants.empty() ? run(prev, ps, in, true)
                                             : run_variant(prev, ps, in, prev_variant(prev, step.variants.at(variant)));
  const Outputs got = run_variant(step, s, in, variant);
  const std::string what = std::string(prev.name) + (ps.dtype != s.dtype ? " (fp32 on the same rounded inputs)" : "");
  expect_close_lowp(got, want.o, want.lse, lowp_reference(s, in), s, what);
  expect_close_lowp_grads(got, want, lowp_bwd_reference_vs_prev(s, in, got.o, want.o), s, what);
}

// Against fp64 on fresh inputs.
inline void expect_matches_fp64(const fa::StepInfo& step, const Shape& s, int variant) {
  const std::uint64_t seed = fa::fresh_seed();
  SCOPED_TRACE(trace(step, seed, variant));
  const Inputs in = random_inputs(s, seed);
  expect_close_lowp_to_fp64(run_variant(step, s, in, variant), s, in, true, "fp64");
}

// Realistic shapes, causal and not; seq_q ≠ seq_k both ways (multiples of neither tile).
inline void matches_prev_on_realistic_shapes(const fa::StepInfo& step, const fa::StepInfo& prev, int variant) {
  for (fa::DType t : kTypes)
    for (int d : {64, 128})
      for (bool causal : {false, true}) expect_matches_prev(step, prev, {2, 4, 1024, 1024, d, causal, 0, t}, variant);
}
inline void matches_prev_when_seq_q_differs_from_seq_k(const fa::StepInfo& step, const fa::StepInfo& prev,
                                                       int variant) {
  for (fa::DType t : kTypes)
    for (int d : {64, 128})
      for (bool causal : {false, true})
        for (auto [sq, sk] : {std::pair{1000, 999}, std::pair{300, 1000}, std::pair{1000, 300}})
          expect_matches_prev(step, prev, {1, 3, sq, sk, d, causal, 0, t}, variant);
}

// The edge shapes of attention_checks.h and zero-padded head dims with a scale other than 1/sqrt(d).
inline void matches_fp64_on_edge_shapes(const fa::StepInfo& step, int variant) {
  for (fa::DType t : kTypes)
    for (int d : {64, 128})
      for (Shape s : edge_shapes(d)) {
        s.dtype = t;
        expect_matches_fp64(step, s, variant);
      }
}
inline void matches_fp64_with_padded_head_dims(const fa::StepInfo& step, int variant) {
  for (fa::DType t : kTypes)
    for (const Shape& s : {Shape{1, 2, 50, 70, 40, true, 0.3, t}, Shape{2, 1, 33, 33, 8, false, 0, t},
                           Shape{1, 2, 130, 90, 96, true, 0, t}, Shape{1, 2, 90, 130, 96, false, 0, t}})
      expect_matches_fp64(step, s, variant);
}

// GQA backward: dQ per query head, dK and dV of a K/V head summed over its group's query heads;
// against fp64 (the references sum each group) on the grouped shapes of tensor_core_checks.h.
inline void grouped_kv_heads_match_fp64_backward(const fa::StepInfo& step, int variant) {
  for (fa::DType t : kTypes)
    for (int d : {64, 128})
      for (const Shape& s : grouped_shapes(d, t)) expect_matches_fp64(step, s, variant);
}

// A row whose LSE is −inf sees no key (made by hand, as in attention_checks.h): its dQ row is
// exactly 0, nothing is NaN, and dK, dV match the fp64 backward with that row's dO set to 0, with
// the per-row bounds.
inline void expect_row_without_keys_gets_no_gradient(const fa::StepInfo& step, const Shape& s, int row, int variant) {
  const std::uint64_t seed = fa::fresh_seed();
  SCOPED_TRACE(trace(step, seed, variant) + ", row " + std::to_string(row) + " without keys, " + s.str());
  Inputs in = random_inputs(s, seed);
  fa::attention::Run d(step, params(s, variant), true, in);
  const std::vector<float> O = backward_with_a_row_without_keys(d, in.dout, row, s.head_dim);
  Outputs got;
  got.dq = d.dq.download(), got.dk = d.dk.download(), got.dv = d.dv.download();
  for (int i = 0; i < s.head_dim; ++i)
    EXPECT_EQ(got.dq[std::size_t(row) * s.head_dim + i], 0.f) << "dQ of the row without keys, column " << i;
  const LowpBwdReference grads = lowp_bwd_reference(s, in, O);
  expect_close_lowp_grads(got, grads.rows, grads, s, "fp64 with the row's dO = 0");  // NaN fails it
}
inline void row_without_visible_keys_gets_no_gradient(const fa::StepInfo& step, int variant) {
  for (fa::DType t : kTypes)
    for (int d : {64, 128}) {
      expect_row_without_keys_gets_no_gradient(step, {1, 2, 130, 150, d, true, 0, t}, 70, variant);
      expect_row_without_keys_gets_no_gradient(step, {1, 2, 130, 150, d, false, 0, t}, 0, variant);
    }
}

// One forward, then four backward passes of `variant` on the same inputs: dQ, dK, dV bitwise equal
// (every output NaN-poisoned before each run).
inline void expect_bitwise_repeatable(const fa::StepInfo& step, const Shape& s, int variant) {
  const std::uint64_t seed = fa::fresh_seed();
  SCOPED_TRACE(s.str() + ", seed " + std::to_string(seed));
  fa::attention::Run r(step, params(s, variant), true, random_inputs(s, seed));
  r.checked_forward();
  r.checked_backward();
  const std::vector<float> dq = r.dq.download(), dk = r.dk.download(), dv = r.dv.download();
  for (int rep = 0; rep < 3; ++rep) {
    r.checked_backward();
    for (auto [name, a, b] : {std::tuple{"dQ", r.dq.download(), &dq}, std::tuple{"dK", r.dk.download(), &dk},
                              std::tuple{"dV", r.dv.download(), &dv}}) {
      ASSERT_EQ(a.size(), b->size());
      EXPECT_EQ(std::memcmp(a.data(), b->data(), a.size() * sizeof(float)), 0)
          << name << " differs between two runs of variant " << step.variants.at(variant);
    }
  }
}
// The deterministic variant: no add in an order that timing decides, so two backward runs on the
// same forward give the same bits. Shapes with many key blocks per query row, so that an atomic
// order would have room to vary; one with GQA (dK, dV summed over a group).
inline void deterministic_variant_is_bitwise_reproducible(const fa::StepInfo& step) {
  for (fa::DType t : kTypes)
    for (int d : {64, 128})
      for (const Shape& s : {Shape{2, 3, 700, 900, d, false, 0, t}, Shape{1, 4, 1024, 1024, d, true, 0, t},
                             Shape{1, 4, 1024, 1024, d, true, 0, t, 2}}) {  // the last: GQA
        if (s.kv_heads && !step.attn_rule.gqa) continue;
        expect_bitwise_repeatable(step, s, variant_of(step, "deterministic"));
      }
}

// The Hopper backward steps' deterministic variant (steps 21, 24, 25): the same bits run after run on shapes with
// many key blocks per query tile, causal (its descending order) and not, both head dims; GQA refused (their
// dK and dV sums over a group still add in any order) with a message, never run.
inline void hopper_deterministic_is_bitwise_repeatable(const fa::StepInfo& step) {
  for (fa::DType t : kTypes)
    for (int d : {64, 128})
      for (const Shape& s : {Shape{2, 3, 700, 900, d, false, 0, t}, Shape{1, 4, 1024, 1024, d, true, 0, t}})
        expect_bitwise_repeatable(step, s, variant_of(step, "deterministic"));
}
// A variant refuses GQA (4 query heads over 2 K/V heads) with a usage error whose message holds `why`.
inline void expect_refuses_gqa(const fa::StepInfo& step, int variant, const std::string& why) {
  const Shape s{1, 4, 128, 128, 64, false, 0, fa::DType::F16, 2};
  try {
    fa::attention::Run r(step, params(s, variant), true, random_inputs(s, 1));
    r.checked_forward();
    r.checked_backward();
    FAIL() << "variant " << step.variants.at(variant) << " ran GQA";
  } catch (const fa::UsageError& e) {
    EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
  }
}
inline void hopper_deterministic_refuses_gqa(const fa::StepInfo& step) {
  expect_refuses_gqa(step, variant_of(step, "deterministic"), "does not run GQA");
}

// The workspace: delta (one float per query row); the atomic variant also its fp32 dQ accumulator.
inline void workspace_is_delta_plus_the_atomic_accumulator(const fa::StepInfo& step) {
  fa::AttnParams p;
  p.batch = 8, p.heads = 32, p.seq_q = 2048, p.seq_k = 4096, p.head_dim = 64, p.dtype = fa::DType::F16;
  ASSERT_NE(step.bwd_workspace_bytes, nullptr);
  p.variant = variant_of(step, "deterministic");
  EXPECT_EQ(step.bwd_workspace_bytes(p), 8ull * 32 * 2048 * 4);
  p.variant = variant_of(step, "atomic");
  EXPECT_EQ(step.bwd_workspace_bytes(p), 8ull * 32 * 2048 * 4 * (1 + 64));
}

// fp32, head dims above 128 or not a multiple of 8, with and without the backward.
inline void refuses_what_it_cannot_run_backward(const fa::StepInfo& step) {
  refuses_what_it_cannot_run(step);
  fa::Problem pr;
  pr.family = fa::Family::Attention;
  pr.backward = true;
  pr.attn.dtype = fa::DType::F16;
  EXPECT_EQ(fa::step_supports(step, pr), "");
  for (int d : {60, 136}) {
    pr.attn.head_dim = d;
    EXPECT_NE(fa::step_supports(step, pr), "") << "head_dim " << d;
  }
  pr.attn.head_dim = 64, pr.attn.dtype = fa::DType::F32;
  EXPECT_NE(fa::step_supports(step, pr), "") << "fp32";
}

// ---- the tuned backward steps (13-16): their candidates, workspace and causal order ---------------------
// A tuned step's compiled instances, pinned in turn through its pin variable (FA_STEPNN_CONFIG: the
// autotuner is bypassed), so that every candidate is tested, not only those the tuner picks here.
struct Candidates {
  int (*count)(int head_dim);
  std::string (*name)(int head_dim, int i);
  const char* pin_env;
};
// f(dtype, head_dim) with every candidate of every head_dim instance pinned in turn.
template <class F>
void each_pinned_candidate(const Candidates& c, F f) {
  for (fa::DType t : kTypes)
    for (int d : {64, 128})
      for (int i = 0; i < c.count(d); ++i) {
        const std::string name = c.name(d, i);
        SCOPED_TRACE("candidate " + name);
        setenv(c.pin_env, name.c_str(), 1);
        f(t, d);
        unsetenv(c.pin_env);
      }
}
// Every candidate against fp64 on shapes that take the masked, unmasked, ragged and (from step 14)
// staggered paths (seq 333: 6 query tiles, so a key block's unmasked tiles start at a rotated one),
// and against the previous step on a longer one.
inline void every_candidate_matches_fp64_and_prev(const fa::StepInfo& step, const fa::StepInfo& prev,
                                                  const Candidates& c, int variant) {
  each_pinned_candidate(c, [&](fa::DType t, int d) {
    for (const Shape& s : {Shape{1, 2, 333, 333, d, true, 0, t}, Shape{2, 2, 300, 1000, d, false, 0, t},
                           Shape{1, 3, 1000, 300, d, true, 0, t}, Shape{1, 2, 1, 77, d, false, 0, t}})
      expect_matches_fp64(step, s, variant);
    expect_matches_prev(step, prev, {1, 4, 1100, 1100, d, variant == 0, 0, t}, variant);
  });
}
// The workspace: dQ_accum holds whole query tiles of 128 rows and the instance's 64 or 128 columns
// (ragged seq_q and padded head_dim round up), then (a deterministic variant) its turns, one per
// query tile of 64, and next, padded to 16 bytes, then delta.
inline void dq_accum_holds_whole_tiles(const fa::StepInfo& step) {
  for (bool causal : {false, true})
    for (auto [seq, d, padded_seq, padded_d] :
         {std::tuple{1, 8, 128, 64}, std::tuple{129, 64, 256, 64}, std::tuple{1000, 40, 1024, 64},
          std::tuple{300, 72, 384, 128}, std::tuple{2048, 128, 2048, 128}}) {
      const Shape s{2, 3, seq, seq, d, causal, 0, fa::DType::F16};
      SCOPED_TRACE(s.str());
      const std::size_t rows = std::size_t(2) * 3 * seq, tiles = std::size_t(2) * 3 * padded_seq;
      EXPECT_EQ(step.bwd_workspace_bytes(params(s, variant_of(step, "atomic"))), tiles * padded_d * 4 + rows * 4);
      for (std::size_t v = 0; v < step.variants.size(); ++v)
        if (step.variants[v] == "deterministic")
          EXPECT_EQ(step.bwd_workspace_bytes(params(s, int(v))),
                    tiles * padded_d * 4 + ((tiles / 64 + 1) * 4 + 15) / 16 * 16 + rows * 4);
    }
}
// The causal order (step 15): heads in groups of a power of two that divides batch·K/V heads, the
// largest with group·seq_k <= 16384 (1 where none is); one head at a time without the mask; GQA:
// groups of K/V heads (the grouped instance's blocks each walk a K/V head's query heads).
inline void causal_head_groups_divide_the_heads(int (*head_group)(const fa::AttnParams&)) {
  for (int seq : {100, 1024, 2048, 3000, 8192, 16384, 20000})
    for (int batch : {1, 3, 8})
      for (int heads : {1, 6, 16, 17})
        for (bool causal : {false, true}) {
          const Shape s{batch, heads, seq, seq, 64, causal, 0, fa::DType::F16};
          SCOPED_TRACE(s.str());
          const int g = head_group(params(s, 0)), n = batch * heads;
          if (!causal) {
            EXPECT_EQ(g, 1);
            continue;
          }
          EXPECT_TRUE(g >= 1 && (g & (g - 1)) == 0 && n % g == 0) << g;
          EXPECT_TRUE(g == 1 || g * seq <= 16384) << g;
          EXPECT_FALSE(2 * g * seq <= 16384 && n % (2 * g) == 0) << g << ": a larger group fits";
        }
  EXPECT_EQ(head_group(params({1, 8, 1024, 1024, 64, true, 0, fa::DType::F16, 2}, 0)), 2);
}

}  // namespace tc_backward_checks
