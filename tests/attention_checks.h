// attention_checks.h: the checks every attention step's GPU test runs (04 onwards), so a test
// file says only which step it tests, on which shapes, and against what.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <thread>
#include <vector>

#include "buffer.h"
#include "compare.h"
#include "golden.h"
#include "npy.h"
#include "ops.h"
#include "random.h"
#include "reference.h"
#include "tolerance.h"

namespace attention_checks {

struct Shape {
  int batch, heads, seq_q, seq_k, head_dim;
  bool causal;
  double scale = 0;  // 0: 1/sqrt(head_dim)
  fa::AttnParams params() const {
    fa::AttnParams p;
    p.batch = batch, p.heads = heads, p.seq_q = seq_q, p.seq_k = seq_k, p.head_dim = head_dim;
    p.scale = float(scale > 0 ? scale : 1.0 / std::sqrt(double(head_dim)));
    p.causal = causal;
    return p;
  }
  std::size_t q_elems() const { return std::size_t(batch) * heads * seq_q * head_dim; }
  std::size_t k_elems() const { return std::size_t(batch) * heads * seq_k * head_dim; }
  std::size_t rows() const { return std::size_t(batch) * heads * seq_q; }
  std::string str() const {
    return "B" + std::to_string(batch) + " H" + std::to_string(heads) + " Sq" + std::to_string(seq_q) + " Sk" +
           std::to_string(seq_k) + " D" + std::to_string(head_dim) + (causal ? " causal" : "");
  }
};

struct Inputs {
  std::vector<float> q, k, v, dout;
};
// Uniform in [-0.5, 1.5) (the +0.5 offset keeps O away from zero), dO in [-1, 1), and one
// query row 20x larger: a very peaked softmax.
inline Inputs random_inputs(const Shape& s, std::uint64_t seed) {
  Inputs in{std::vector<float>(s.q_elems()), std::vector<float>(s.k_elems()), std::vector<float>(s.k_elems()),
            std::vector<float>(s.q_elems())};
  fa::fill_uniform(in.q, seed, -0.5f, 1.5f);
  fa::fill_uniform(in.k, seed + 1, -0.5f, 1.5f);
  fa::fill_uniform(in.v, seed + 2, -0.5f, 1.5f);
  fa::fill_uniform(in.dout, seed + 3, -1.f, 1.f);
  const std::size_t big = std::min(1, s.seq_q - 1);
  for (int d = 0; d < s.head_dim; ++d) in.q[big * s.head_dim + d] *= 20.f;
  return in;
}

struct Outputs {
  std::vector<float> o, lse, dq, dk, dv;
};

// Runs a step's forward (and, with `backward`, its backward on the forward's O and LSE), every
// output NaN-poisoned first.
inline Outputs run(const fa::StepInfo& step, const Shape& s, const Inputs& in, bool backward) {
  const fa::AttnParams p = s.params();
  fa::DeviceBuffer<float> q(in.q), k(in.k), v(in.v), dout(in.dout), o(s.q_elems()), lse(s.rows());
  std::size_t ws = step.fwd_workspace_bytes ? step.fwd_workspace_bytes(p) : 0;
  if (backward && step.bwd_workspace_bytes) ws = std::max(ws, step.bwd_workspace_bytes(p));
  fa::DeviceBuffer<char> workspace(ws);
  o.poison_nan();
  lse.poison_nan();
  step.attn_fwd({p, q.get(), k.get(), v.get(), o.get(), lse.get(), workspace.get()}, nullptr);
  FA_CHECK_LAUNCH();
  FA_CUDA_CHECK(cudaDeviceSynchronize());
  Outputs out{o.download(), lse.download()};
  if (backward) {
    fa::DeviceBuffer<float> dq(s.q_elems()), dk(s.k_elems()), dv(s.k_elems());
    dq.poison_nan(), dk.poison_nan(), dv.poison_nan();
    step.attn_bwd(
        {p, q.get(), k.get(), v.get(), o.get(), dout.get(), lse.get(), dq.get(), dk.get(), dv.get(), workspace.get()},
        nullptr);
    FA_CHECK_LAUNCH();
    FA_CUDA_CHECK(cudaDeviceSynchronize());
    out.dq = dq.download(), out.dk = dk.download(), out.dv = dv.download();
  }
  return out;
}

struct Reference {
  std::vector<double> o, lse, dq, dk, dv;
};
// fp64, every head (one thread per head).
inline Reference reference(const Shape& s, const Inputs& in, bool backward) {
  Reference r{std::vector<double>(s.q_elems()), std::vector<double>(s.rows())};
  if (backward) r.dq.resize(s.q_elems()), r.dk.resize(s.k_elems()), r.dv.resize(s.k_elems());
  const std::size_t qs = std::size_t(s.seq_q) * s.head_dim, ks = std::size_t(s.seq_k) * s.head_dim;
  const fa::AttnParams p = s.params();
  const ref::AttnShape one{1, 1, s.seq_q, s.seq_k, s.head_dim, double(p.scale), s.causal};
  auto head = [&](std::size_t h) {
    const std::vector<double> q(in.q.begin() + h * qs, in.q.begin() + (h + 1) * qs),
        k(in.k.begin() + h * ks, in.k.begin() + (h + 1) * ks), v(in.v.begin() + h * ks, in.v.begin() + (h + 1) * ks),
        dout(in.dout.begin() + h * qs, in.dout.begin() + (h + 1) * qs);
    ref::attention_forward(one, q.data(), k.data(), v.data(), r.o.data() + h * qs, r.lse.data() + h * s.seq_q);
    if (backward)
      ref::attention_backward(one, q.data(), k.data(), v.data(), dout.data(), r.dq.data() + h * qs,
                              r.dk.data() + h * ks, r.dv.data() + h * ks);
  };
  std::vector<std::thread> pool;
  for (std::size_t h = 0; h < std::size_t(s.batch) * s.heads; ++h) pool.emplace_back(head, h);
  for (auto& t : pool) t.join();
  return r;
}

// Compares every output that both sides have, with the tolerances of common/tolerance.h.
template <class Out, class Ref>
void expect_close(const Out& got, const Ref& want, const Shape& s, bool backward, const std::string& what) {
  using namespace fa::tol;
  const std::vector<std::size_t> qs{std::size_t(s.batch), std::size_t(s.heads), std::size_t(s.seq_q),
                                    std::size_t(s.head_dim)},
      ks{std::size_t(s.batch), std::size_t(s.heads), std::size_t(s.seq_k), std::size_t(s.head_dim)},
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
  expect_close(run(step, s, in, backward), reference(s, in, backward), s, backward, "fp64");
}

// The step against the step before it, same inputs.
inline void expect_matches_step(const fa::StepInfo& step, const fa::StepInfo& prev, const Shape& s, bool backward) {
  const std::uint64_t seed = fa::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const Inputs in = random_inputs(s, seed);
  expect_close(run(step, s, in, backward), run(prev, s, in, backward), s, backward, prev.name);
}

// Every golden attention case of tests/data (NumPy, fp64), every element.
inline void expect_matches_golden(const fa::StepInfo& step, bool backward) {
  const auto cases = golden::cases(FA_DATA_DIR, "attention");
  ASSERT_FALSE(cases.empty());
  for (const auto& c : cases) {
    const Shape s{int(c.integer("batch")), int(c.integer("heads")),    int(c.integer("seq_q")),
                  int(c.integer("seq_k")), int(c.integer("head_dim")), c.integer("causal") != 0,
                  c.number("scale")};
    auto floats = [&](const char* t) {
      const fa::NpyArray a = fa::read_npy(c.path(t));
      return std::vector<float>(a.data.begin(), a.data.end());
    };
    const Inputs in{floats("q"), floats("k"), floats("v"), floats("dout")};
    const Reference want{fa::read_npy(c.path("o")).data, fa::read_npy(c.path("lse")).data,
                         fa::read_npy(c.path("dq")).data, fa::read_npy(c.path("dk")).data,
                         fa::read_npy(c.path("dv")).data};
    SCOPED_TRACE(c.name);
    expect_close(run(step, s, in, backward), want, s, backward, "golden " + c.name);
  }
}

// A row whose LSE is -inf sees no key (impossible with top-left causal masks and seq_k >= 1, so the
// test makes one by hand): it attends to nothing, gets no gradient and gives none to K and V, and
// nothing may turn NaN. The step's backward, on its forward's outputs with that row's LSE set to
// -inf and its O row to 0, must match the fp64 backward with that row's dO set to 0.
inline void expect_row_without_keys_gets_no_gradient(const fa::StepInfo& step, const Shape& s, int row) {
  const std::uint64_t seed = fa::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed) + ", row " + std::to_string(row) + " without keys, " + s.str());
  Inputs in = random_inputs(s, seed);
  const fa::AttnParams p = s.params();
  fa::DeviceBuffer<float> q(in.q), k(in.k), v(in.v), dout(in.dout), o(s.q_elems()), lse(s.rows());
  std::size_t ws = step.fwd_workspace_bytes ? step.fwd_workspace_bytes(p) : 0;
  if (step.bwd_workspace_bytes) ws = std::max(ws, step.bwd_workspace_bytes(p));
  fa::DeviceBuffer<char> workspace(ws);
  step.attn_fwd({p, q.get(), k.get(), v.get(), o.get(), lse.get(), workspace.get()}, nullptr);
  FA_CHECK_LAUNCH();
  FA_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<float> O = o.download(), L = lse.download();
  L[row] = -INFINITY;
  std::fill(O.begin() + std::size_t(row) * s.head_dim, O.begin() + std::size_t(row + 1) * s.head_dim, 0.f);
  o.upload(O), lse.upload(L);
  fa::DeviceBuffer<float> dq(s.q_elems()), dk(s.k_elems()), dv(s.k_elems());
  dq.poison_nan(), dk.poison_nan(), dv.poison_nan();
  step.attn_bwd(
      {p, q.get(), k.get(), v.get(), o.get(), dout.get(), lse.get(), dq.get(), dk.get(), dv.get(), workspace.get()},
      nullptr);
  FA_CHECK_LAUNCH();
  FA_CUDA_CHECK(cudaDeviceSynchronize());
  std::fill(in.dout.begin() + std::size_t(row) * s.head_dim, in.dout.begin() + std::size_t(row + 1) * s.head_dim, 0.f);
  const Reference want = reference(s, in, true);
  using namespace fa::tol;
  for (auto [name, got, w] : {std::tuple{"dQ", dq.download(), &want.dq}, std::tuple{"dK", dk.download(), &want.dk},
                              std::tuple{"dV", dv.download(), &want.dv}}) {
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
