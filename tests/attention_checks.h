// attention_checks.h: the checks every attention step's GPU test runs (04 onwards), so a test
// file says only which step it tests, on which shapes, and against what.
//
// fp32 shapes (steps 04-08): O, LSE (and dQ, dK, dV) element-wise with the fp32 tolerances.
// fp16/bf16 shapes (Shape::dtype; steps 09+): the inputs are rounded to the type, and every
// reference or fp32 previous step sees the same rounded values (as float); O is checked per query
// row, max_j |O_ij - want_ij| <= 2·max_j |ref_lowp_ij - ref_ij| + 1 ulp (tolerance.h, bounds from
// the fp64 reference and ref_lowp of every row), LSE with kAttnLseLowp; with the backward, dQ per
// query row and dK, dV per key row by the same rule (no test runs a 16-bit backward yet).
//   expect_matches_reference   vs fp64 on fresh inputs
//   expect_matches_step        vs the previous step on the same inputs; a previous step that
//                              runs only fp32 runs the fp32 problem on the rounded inputs
//   expect_matches_golden      vs the golden cases (fp16/bf16: the golden inputs rounded, against
//                              the C++ fp64 reference recomputed on them, since the golden
//                              outputs belong to the unrounded inputs)
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <tuple>
#include <vector>

#include "attention_inputs.h"
#include "attention_reference.h"
#include "compare.h"
#include "golden.h"
#include "launch.h"
#include "lowp.h"
#include "npy.h"
#include "ops.h"
#include "random.h"
#include "tolerance.h"

namespace attention_checks {

struct Shape {
  int batch, heads, seq_q, seq_k, head_dim;
  bool causal;
  double scale = 0;  // 0: 1/sqrt(head_dim)
  fa::DType dtype = fa::DType::F32;
  int kv_heads = 0;  // K/V heads (GQA): 0 for as many as query heads
  bool kv_cache = false;  // a KV cache: lengths per sequence in the Inputs, seq_k the capacity (step 22)
  fa::AttnParams params() const {
    fa::AttnParams p;
    p.batch = batch, p.heads = heads, p.seq_q = seq_q, p.seq_k = seq_k, p.head_dim = head_dim;
    p.scale = float(scale > 0 ? scale : 1.0 / std::sqrt(double(head_dim)));
    p.causal = causal;
    p.dtype = dtype;
    p.kv_heads = kv_heads;
    p.kv_cache = kv_cache;
    return p;
  }
  fa::Problem problem() const {  // for StepInfo::supports
    fa::Problem pr;
    pr.family = fa::Family::Attention;
    pr.attn = params();
    return pr;
  }
  std::size_t q_elems() const { return std::size_t(batch) * heads * seq_q * head_dim; }
  int kvh() const { return kv_heads > 0 ? kv_heads : heads; }
  std::size_t k_elems() const { return std::size_t(batch) * kvh() * seq_k * head_dim; }
  std::size_t rows() const { return std::size_t(batch) * heads * seq_q; }
  std::string str() const {
    return "B" + std::to_string(batch) + " H" + std::to_string(heads) + " Sq" + std::to_string(seq_q) + " Sk" +
           std::to_string(seq_k) + " D" + std::to_string(head_dim) + (causal ? " causal" : "") +
           (kvh() != heads ? " KV" + std::to_string(kvh()) : "") + (kv_cache ? " cache" : "") +
           (fa::is_lowp(dtype) ? std::string(" ") + fa::dtype_name(dtype) : "");
  }
};

// Inputs, the device run and the references are the attention family's (harness/attention_inputs.h,
// harness/attention_reference.h), so a test and --check draw and launch the same way.
using Inputs = fa::attention::Inputs;
using Outputs = fa::attention::Outputs;

// Uniform in [-0.5, 1.5) (the +0.5 offset keeps O away from zero), dO in [-1, 1), and one
// query row 20x larger: a very peaked softmax. Rounded to the shape's type (nearest even).
inline Inputs random_inputs(const Shape& s, std::uint64_t seed) {
  return fa::attention::make_inputs(s.params(), /*with_dout=*/true, seed);
}

// Runs a step's forward (and, with `backward`, its backward on the forward's O and LSE), every
// output NaN-poisoned first; outputs as float whatever the shape's type.
inline Outputs run(const fa::StepInfo& step, const Shape& s, const Inputs& in, bool backward) {
  fa::attention::Run r(step, s.params(), backward, in);
  return fa::attention::run_checked(r, backward);
}

inline std::vector<std::size_t> all_indices(std::size_t n) {
  std::vector<std::size_t> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = i;
  return v;
}

struct Reference {
  std::vector<double> o, lse, dq, dk, dv;
};
// fp64, every head.
inline Reference reference(const Shape& s, const Inputs& in, bool backward) {
  fa::attention::HeadRef r =
      fa::attention::reference_heads(s.params(), backward, in, all_indices(std::size_t(s.batch) * s.heads));
  return {std::move(r.o), std::move(r.lse), std::move(r.dq), std::move(r.dk), std::move(r.dv)};
}

// fp16/bf16: the fp64 reference and ref_lowp (the same math in low precision; tolerance.h) of
// every query row, on the (rounded) inputs; and the per-row bounds of O.
struct LowpReference {
  std::vector<double> o, o_lowp, lse, bound;  // [rows, head_dim] x2, [rows], [rows]
};
inline LowpReference lowp_reference(const Shape& s, const Inputs& in) {
  fa::attention::RowRef r = fa::attention::reference_rows(s.params(), in, all_indices(s.rows()));
  const std::vector<double> bound = fa::lowp_row_bounds(r.o, r.o_lowp, s.head_dim, s.dtype);
  return {std::move(r.o), std::move(r.o_lowp), std::move(r.lse), bound};
}

// fp16/bf16: O row by row against `want` with the per-row bounds of `ref`, LSE element-wise
// with kAttnLseLowp.
template <class WantO, class WantL>
void expect_close_lowp(const Outputs& got, const WantO& want_o, const WantL& want_lse, const LowpReference& ref,
                       const Shape& s, const std::string& what) {
  const std::vector<std::size_t> qs{std::size_t(s.batch), std::size_t(s.heads), std::size_t(s.seq_q),
                                    std::size_t(s.head_dim)},
      ls{std::size_t(s.batch), std::size_t(s.heads), std::size_t(s.seq_q)};
  const auto o = fa::compare_rows(got.o, want_o, s.head_dim, ref.bound, qs);
  EXPECT_TRUE(o.ok()) << s.str() << " O vs " << what << " (per row: 2 max|ref_lowp - ref| + 1 ulp): " << o.summary();
  const auto l = fa::compare(got.lse, want_lse, fa::tol::kAttnLseLowp, ls);
  EXPECT_TRUE(l.ok()) << s.str() << " LSE vs " << what << ": " << l.summary();
}

// fp16/bf16 backward: the fp64 reference and ref_lowp of every row of dQ (query rows) and of dK,
// dV (key rows), and the per-row bounds of each.
struct LowpBwdReference {
  fa::attention::BwdRowRef rows;
  std::vector<double> bound[3];  // dQ, dK, dV
};
// `o`: the O the step's backward was given (its forward's output): ref_lowp's delta is rowsum(dO∘O)
// of it, as the step computes it, so the forward's error in O reaches both sides alike.
// prev_o: a second O (lowp_bwd_reference_vs_prev), or null.
inline LowpBwdReference lowp_bwd_reference(const Shape& s, const Inputs& inputs, const std::vector<float>& o,
                                           const std::vector<float>* prev_o = nullptr) {
  LowpBwdReference r;
  Inputs in = inputs;
  in.o = o;
  r.rows = fa::attention::reference_bwd_rows(s.params(), in, all_indices(s.rows()),
                                             all_indices(std::size_t(s.batch) * s.kvh() * s.seq_k), prev_o);
  using fa::tol::kAttnGradAtolFloor;  // fp32's cancellation floor (tolerance.h)
  r.bound[0] = fa::lowp_row_bounds(r.rows.dq, r.rows.dq_lowp, s.head_dim, s.dtype, &r.rows.dq_given, kAttnGradAtolFloor);
  r.bound[1] = fa::lowp_row_bounds(r.rows.dk, r.rows.dk_lowp, s.head_dim, s.dtype, &r.rows.dk_given, kAttnGradAtolFloor);
  r.bound[2] = fa::lowp_row_bounds(r.rows.dv, r.rows.dv_lowp, s.head_dim, s.dtype, nullptr, kAttnGradAtolFloor);
  return r;
}
// For a comparison with a previous step: `o` this step's O, `prev_o` the previous step's. Where they
// differ (the two forwards differ), the previous step's gradients carry the error of its own O, so
// the dQ and dK rows also allow what delta from prev_o alone moves (tolerance.h, add_from_prev_o);
// where they are equal, the bounds of lowp_bwd_reference(s, inputs, o).
inline LowpBwdReference lowp_bwd_reference_vs_prev(const Shape& s, const Inputs& inputs, const std::vector<float>& o,
                                                   const std::vector<float>& prev_o) {
  if (prev_o == o) return lowp_bwd_reference(s, inputs, o);
  LowpBwdReference r = lowp_bwd_reference(s, inputs, o, &prev_o);
  fa::add_from_prev_o(r.bound[0], r.rows.dq, r.rows.dq_prev, s.head_dim);
  fa::add_from_prev_o(r.bound[1], r.rows.dk, r.rows.dk_prev, s.head_dim);
  return r;
}

// fp16/bf16: dQ, dK, dV row by row against `want` (fp64 or a previous step's) with the per-row
// bounds of `ref`.
template <class Want>
void expect_close_lowp_grads(const Outputs& got, const Want& want, const LowpBwdReference& ref, const Shape& s,
                             const std::string& what) {
  const std::vector<std::size_t> qs{std::size_t(s.batch), std::size_t(s.heads), std::size_t(s.seq_q),
                                    std::size_t(s.head_dim)},
      ks{std::size_t(s.batch), std::size_t(s.kvh()), std::size_t(s.seq_k), std::size_t(s.head_dim)};
  for (auto [name, g, w, bound, shape] :
       {std::tuple{"dQ", &got.dq, &want.dq, &ref.bound[0], qs}, std::tuple{"dK", &got.dk, &want.dk, &ref.bound[1], ks},
        std::tuple{"dV", &got.dv, &want.dv, &ref.bound[2], ks}}) {
    const auto c = fa::compare_rows(*g, *w, s.head_dim, *bound, shape);
    EXPECT_TRUE(c.ok()) << s.str() << " " << name << " vs " << what
                        << " (per row: 2 max|ref_lowp - ref| + 1 ulp): " << c.summary();
  }
}

// fp16/bf16: every check of the forward (and the backward) against fp64 on `in`.
inline void expect_close_lowp_to_fp64(const Outputs& got, const Shape& s, const Inputs& in, bool backward,
                                      const std::string& what) {
  const LowpReference ref = lowp_reference(s, in);
  expect_close_lowp(got, ref.o, ref.lse, ref, s, what);
  if (!backward) return;
  const LowpBwdReference grads = lowp_bwd_reference(s, in, got.o);
  expect_close_lowp_grads(got, grads.rows, grads, s, what);
}

// Compares every output that both sides have, with the tolerances of harness/tolerance.h.
template <class Out, class Ref>
void expect_close(const Out& got, const Ref& want, const Shape& s, bool backward, const std::string& what) {
  using namespace fa::tol;
  const std::vector<std::size_t> qs{std::size_t(s.batch), std::size_t(s.heads), std::size_t(s.seq_q),
                                    std::size_t(s.head_dim)},
      ks{std::size_t(s.batch), std::size_t(s.kvh()), std::size_t(s.seq_k), std::size_t(s.head_dim)},
      ls{std::size_t(s.batch), std::size_t(s.heads), std::size_t(s.seq_q)};
  const auto o = fa::compare(got.o, want.o, fa::scaled_tolerance(kAttnOutAtolRel, kAttnOutRtol, want.o), qs);
  EXPECT_TRUE(o.ok()) << s.str() << " O vs " << what << ": " << o.summary();
  const auto l = fa::compare(got.lse, want.lse, kAttnLse, ls);
  EXPECT_TRUE(l.ok()) << s.str() << " LSE vs " << what << ": " << l.summary();
  if (!backward) return;
  for (auto [name, g, w, shape] : {std::tuple{"dQ", &got.dq, &want.dq, qs}, std::tuple{"dK", &got.dk, &want.dk, ks},
                                   std::tuple{"dV", &got.dv, &want.dv, ks}}) {
    const auto c =
        fa::compare(*g, *w, fa::scaled_tolerance(kAttnGradAtolRel, kAttnGradRtol, *w, kAttnGradAtolFloor), shape);
    EXPECT_TRUE(c.ok()) << s.str() << " " << name << " vs " << what << ": " << c.summary();
  }
}

// The step against fp64 on fresh random inputs.
inline void expect_matches_reference(const fa::StepInfo& step, const Shape& s, bool backward) {
  const std::uint64_t seed = fa::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const Inputs in = random_inputs(s, seed);
  if (fa::is_lowp(s.dtype)) {
    expect_close_lowp_to_fp64(run(step, s, in, backward), s, in, backward, "fp64");
    return;
  }
  expect_close(run(step, s, in, backward), reference(s, in, backward), s, backward, "fp64");
}

// The step against the step before it, same inputs. fp16/bf16: `prev` runs the same type if it
// supports it, else the fp32 shape on the rounded inputs; O (and dQ, dK, dV) within the per-row
// bounds (the fp64 reference and ref_lowp of every row; dQ, dK: plus what delta from the previous
// step's O moves where its forward differs, lowp_bwd_reference_vs_prev).
inline void expect_matches_step(const fa::StepInfo& step, const fa::StepInfo& prev, const Shape& s, bool backward) {
  const std::uint64_t seed = fa::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const Inputs in = random_inputs(s, seed);
  if (fa::is_lowp(s.dtype)) {
    Shape ps = s;
    auto why = [&](const Shape& x) { return fa::step_supports(prev, x.problem()); };
    if (!why(s).empty()) ps.dtype = fa::DType::F32;
    ASSERT_EQ(why(ps), "") << prev.name << " runs neither " << s.str() << " nor its fp32 version";
    ASSERT_TRUE(!backward || prev.attn_bwd) << prev.name << " has no backward";
    const Outputs want = run(prev, ps, in, backward), got = run(step, s, in, backward);
    const std::string what = std::string(prev.name) + (ps.dtype != s.dtype ? " (fp32 on the same rounded inputs)" : "");
    expect_close_lowp(got, want.o, want.lse, lowp_reference(s, in), s, what);
    if (backward) expect_close_lowp_grads(got, want, lowp_bwd_reference_vs_prev(s, in, got.o, want.o), s, what);
    return;
  }
  expect_close(run(step, s, in, backward), run(prev, s, in, backward), s, backward, prev.name);
}

// Every golden attention case of tests/data (NumPy, fp64), every element. fp16/bf16 (`dtype`):
// the golden inputs rounded to it, against the fp64 reference and ref_lowp recomputed in C++ on
// the rounded inputs (the golden outputs belong to the unrounded ones; the C++ reference is
// itself checked against them by the CPU tests).
inline void expect_matches_golden(const fa::StepInfo& step, bool backward, fa::DType dtype = fa::DType::F32) {
  const auto cases = golden::cases(FA_DATA_DIR, "attention");
  ASSERT_FALSE(cases.empty());
  for (const auto& c : cases) {
    const Shape s{
        int(c.integer("batch")),    int(c.integer("heads")),  int(c.integer("seq_q")), int(c.integer("seq_k")),
        int(c.integer("head_dim")), c.integer("causal") != 0, c.number("scale"),       dtype};
    auto floats = [&](const char* t) {
      const fa::NpyArray a = fa::read_npy(c.path(t));
      return std::vector<float>(a.data.begin(), a.data.end());
    };
    Inputs in{floats("q"), floats("k"), floats("v"), floats("dout")};
    SCOPED_TRACE(c.name);
    if (fa::is_lowp(dtype)) {
      for (auto* t : {&in.q, &in.k, &in.v, &in.dout}) fa::round_to(dtype, *t);
      expect_close_lowp_to_fp64(run(step, s, in, backward), s, in, backward, "fp64 on golden " + c.name + " rounded");
      continue;
    }
    const Reference want{fa::read_npy(c.path("o")).data, fa::read_npy(c.path("lse")).data,
                         fa::read_npy(c.path("dq")).data, fa::read_npy(c.path("dk")).data,
                         fa::read_npy(c.path("dv")).data};
    expect_close(run(step, s, in, backward), want, s, backward, "golden " + c.name);
  }
}

// A row whose LSE is -inf sees no key (impossible with top-left causal masks and seq_k >= 1, so the
// test makes one by hand). Runs the forward of `d`, sets query row `row`'s LSE to -inf and its O row
// to 0, runs the backward on that, and returns the O it was given; `dout` gets that row set to 0,
// which is what the row contributes to an exact backward: nothing.
inline std::vector<float> backward_with_a_row_without_keys(fa::attention::Run& d, std::vector<float>& dout, int row,
                                                           int head_dim) {
  d.checked_forward();
  std::vector<float> O = d.o.download(), L = d.lse.download();
  L[row] = -INFINITY;
  const std::size_t from = std::size_t(row) * head_dim, to = from + head_dim;
  std::fill(O.begin() + from, O.begin() + to, 0.f);
  d.o.upload(O), d.lse.upload(L);
  d.checked_backward();
  std::fill(dout.begin() + from, dout.begin() + to, 0.f);
  return O;
}

// Such a row attends to nothing, gets no gradient and gives none to K and V, and nothing may turn
// NaN: the step's backward must match the fp64 backward with that row's dO set to 0.
inline void expect_row_without_keys_gets_no_gradient(const fa::StepInfo& step, const Shape& s, int row) {
  const std::uint64_t seed = fa::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed) + ", row " + std::to_string(row) + " without keys, " + s.str());
  Inputs in = random_inputs(s, seed);
  fa::attention::Run d(step, s.params(), true, in);
  backward_with_a_row_without_keys(d, in.dout, row, s.head_dim);
  const Reference want = reference(s, in, true);
  using namespace fa::tol;
  for (auto [name, got, w] : {std::tuple{"dQ", d.dq.download(), &want.dq}, std::tuple{"dK", d.dk.download(), &want.dk},
                              std::tuple{"dV", d.dv.download(), &want.dv}}) {
    const auto c = fa::compare(got, *w, fa::scaled_tolerance(kAttnGradAtolRel, kAttnGradRtol, *w, kAttnGradAtolFloor));
    EXPECT_TRUE(c.ok()) << s.str() << " " << name << " vs fp64: " << c.summary();
  }
}

// Shapes around every boundary a tiled kernel has: 1, odd, tile ± 1, seq_q ≠ seq_k both ways.
inline std::vector<Shape> edge_shapes(int head_dim) {
  std::vector<Shape> out;
  for (bool causal : {false, true})
    for (auto [sq, sk] : {std::pair{1, 1}, std::pair{1, 77}, std::pair{77, 1}, std::pair{17, 17}, std::pair{63, 65},
                          std::pair{64, 64}, std::pair{65, 63}, std::pair{127, 129}, std::pair{128, 128},
                          std::pair{200, 77}, std::pair{77, 200}, std::pair{257, 257}})
      out.push_back({1, 2, sq, sk, head_dim, causal});
  out.push_back({2, 3, 100, 100, head_dim, true});
  return out;
}

}  // namespace attention_checks
