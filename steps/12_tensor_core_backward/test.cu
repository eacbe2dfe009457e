// Step 12 (the backward on tensor cores, fp16/bf16) against step 08 (the fp32 backward, run on the
// same rounded inputs) on realistic shapes, and against the fp64 reference on the golden inputs,
// the edge shapes and padded head dims, with the per-row low-precision rule of harness/tolerance.h
// (dQ per query row, dK and dV per key row: 2·max|ref_lowp − ref| + 1 ulp). Both ways of
// producing dQ (AttnParams::variant: 0 atomic, 1 deterministic) run every comparison; the
// deterministic one must give the same bits run after run. A row without visible keys gets no
// gradient and no NaN; what the step refuses.
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "tensor_core_checks.h"

namespace step08 {
const fa::StepInfo& info();
}
namespace step12 {
const fa::StepInfo& info();
}

namespace {
using namespace tensor_core_checks;
const fa::StepInfo& kStep = step12::info();
const fa::StepInfo& kPrev = step08::info();
constexpr int kDeterministic = 0, kAtomic = 1;
constexpr int kVariants[] = {kDeterministic, kAtomic};

std::string variant_name(int variant) { return kStep.variants.at(variant); }

fa::AttnParams params(const Shape& s, int variant) {
  fa::AttnParams p = s.params();
  p.variant = variant;
  return p;
}

// The step's forward and backward in one variant, every output NaN-poisoned first.
Outputs run_variant(const Shape& s, const Inputs& in, int variant) {
  fa::attention::Run r(kStep, params(s, variant), true, in);
  return fa::attention::run_checked(r, true);
}

// Against step 08 in fp32 on the same rounded inputs: O and LSE (step 11's forward) and dQ, dK, dV.
void expect_matches_step08(const Shape& s, int variant) {
  const std::uint64_t seed = fa::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed) + ", variant " + variant_name(variant));
  const Inputs in = random_inputs(s, seed);
  Shape ps = s;
  ps.dtype = fa::DType::F32;
  const Outputs want = run(kPrev, ps, in, true), got = run_variant(s, in, variant);
  const std::string what = std::string(kPrev.name) + " (fp32 on the same rounded inputs)";
  expect_close_lowp(got, want.o, want.lse, lowp_reference(s, in), s, what);
  expect_close_lowp_grads(got, want, lowp_bwd_reference(s, in, got.o), s, what);
}

// Against fp64 on fresh inputs.
void expect_matches_fp64(const Shape& s, int variant) {
  const std::uint64_t seed = fa::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed) + ", variant " + variant_name(variant));
  const Inputs in = random_inputs(s, seed);
  expect_close_lowp_to_fp64(run_variant(s, in, variant), s, in, true, "fp64");
}

TEST(Step12TensorCoreBackward, DeclaresItsVariants) {
  ASSERT_EQ(kStep.variants, (std::vector<std::string>{"deterministic", "atomic"}));
}

TEST(Step12TensorCoreBackward, MatchesStep08OnRealisticShapes) {
  for (int variant : kVariants)
    for (fa::DType t : kTypes)
      for (int d : {64, 128})
        for (bool causal : {false, true}) expect_matches_step08({2, 4, 1024, 1024, d, causal, 0, t}, variant);
}

// The shared helper of every step's test (variant 0, the default: deterministic).
TEST(Step12TensorCoreBackward, MatchesStep08WithTheSharedCheck) {
  for (fa::DType t : kTypes)
    for (int d : {64, 128}) expect_matches_step(kStep, kPrev, {1, 3, 1000, 999, d, true, 0, t}, true);
}

// seq_q ≠ seq_k both ways, lengths that are multiples of neither tile, causal with either longer.
TEST(Step12TensorCoreBackward, MatchesStep08WhenSeqQDiffersFromSeqK) {
  for (int variant : kVariants)
    for (fa::DType t : kTypes)
      for (int d : {64, 128})
        for (bool causal : {false, true}) {
          expect_matches_step08({1, 3, 1000, 999, d, causal, 0, t}, variant);
          expect_matches_step08({1, 2, 300, 1000, d, causal, 0, t}, variant);
          expect_matches_step08({1, 2, 1000, 300, d, causal, 0, t}, variant);
        }
}

TEST(Step12TensorCoreBackward, MatchesGoldenInputs) {
  for (fa::DType t : kTypes) expect_matches_golden(kStep, /*backward=*/true, t);
}

TEST(Step12TensorCoreBackward, MatchesFp64OnEdgeShapes) {
  for (int variant : kVariants)
    for (fa::DType t : kTypes)
      for (int d : {64, 128})
        for (Shape s : edge_shapes(d)) {
          s.dtype = t;
          expect_matches_fp64(s, variant);
        }
}

// head_dim below its instance runs with zero-padded columns; a scale other than 1/sqrt(d).
TEST(Step12TensorCoreBackward, PaddedHeadDims) {
  for (int variant : kVariants)
    for (fa::DType t : kTypes) {
      expect_matches_fp64({1, 2, 50, 70, 40, true, 0.3, t}, variant);
      expect_matches_fp64({2, 1, 33, 33, 8, false, 0, t}, variant);
      expect_matches_fp64({1, 2, 130, 90, 96, true, 0, t}, variant);
      expect_matches_fp64({1, 2, 90, 130, 96, false, 0, t}, variant);
    }
}

// A row whose LSE is −inf sees no key (top-left causal never makes one, so it is made by hand,
// as in attention_checks.h): its dQ row is exactly 0, nothing is NaN, and dK, dV match the fp64
// backward with that row's dO set to 0 (the row contributes nothing), per row as above.
void expect_row_without_keys_gets_no_gradient(const Shape& s, int row, int variant) {
  const std::uint64_t seed = fa::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed) + ", row " + std::to_string(row) + " without keys, " + s.str() +
               ", variant " + variant_name(variant));
  Inputs in = random_inputs(s, seed);
  fa::attention::Run d(kStep, params(s, variant), true, in);
  d.checked_forward();
  std::vector<float> O = d.o.download(), L = d.lse.download();
  L[row] = -INFINITY;
  std::fill(O.begin() + std::size_t(row) * s.head_dim, O.begin() + std::size_t(row + 1) * s.head_dim, 0.f);
  d.o.upload(O), d.lse.upload(L);
  d.checked_backward();
  Outputs got;
  got.dq = d.dq.download(), got.dk = d.dk.download(), got.dv = d.dv.download();
  for (int i = 0; i < s.head_dim; ++i)
    EXPECT_EQ(got.dq[std::size_t(row) * s.head_dim + i], 0.f) << "dQ of the row without keys, column " << i;
  std::fill(in.dout.begin() + std::size_t(row) * s.head_dim, in.dout.begin() + std::size_t(row + 1) * s.head_dim, 0.f);
  const LowpBwdReference grads = lowp_bwd_reference(s, in, O);
  expect_close_lowp_grads(got, grads.rows, grads, s, "fp64 with the row's dO = 0");  // NaN fails it
}

TEST(Step12TensorCoreBackward, RowWithoutVisibleKeysGetsNoGradient) {
  for (int variant : kVariants)
    for (fa::DType t : kTypes)
      for (int d : {64, 128}) {
        expect_row_without_keys_gets_no_gradient({1, 2, 130, 150, d, true, 0, t}, 70, variant);
        expect_row_without_keys_gets_no_gradient({1, 2, 130, 150, d, false, 0, t}, 0, variant);
      }
}

// The deterministic variant has no atomics: two backward runs on the same forward give the same
// bits (every output NaN-poisoned before each run). Shapes with many key blocks per query row, so
// that an atomic order would have room to vary.
TEST(Step12TensorCoreBackward, DeterministicVariantIsBitwiseReproducible) {
  for (fa::DType t : kTypes)
    for (int d : {64, 128})
      for (const Shape& s : {Shape{2, 3, 700, 900, d, false, 0, t}, Shape{1, 4, 1024, 1024, d, true, 0, t}}) {
        const std::uint64_t seed = fa::fresh_seed();
        SCOPED_TRACE(s.str() + ", seed " + std::to_string(seed));
        fa::attention::Run r(kStep, params(s, kDeterministic), true, random_inputs(s, seed));
        r.checked_forward();
        r.checked_backward();
        const std::vector<float> dq = r.dq.download(), dk = r.dk.download(), dv = r.dv.download();
        for (int rep = 0; rep < 3; ++rep) {
          r.checked_backward();
          for (auto [name, a, b] : {std::tuple{"dQ", r.dq.download(), &dq}, std::tuple{"dK", r.dk.download(), &dk},
                                    std::tuple{"dV", r.dv.download(), &dv}}) {
            ASSERT_EQ(a.size(), b->size());
            EXPECT_EQ(std::memcmp(a.data(), b->data(), a.size() * sizeof(float)), 0)
                << name << " differs between two runs of the deterministic variant";
          }
        }
      }
}

// delta (one float per query row); the atomic variant also its fp32 dQ accumulator.
TEST(Step12TensorCoreBackward, WorkspaceIsDeltaPlusTheAtomicAccumulator) {
  fa::AttnParams p;
  p.batch = 8, p.heads = 32, p.seq_q = 2048, p.seq_k = 4096, p.head_dim = 64, p.dtype = fa::DType::F16;
  ASSERT_NE(kStep.bwd_workspace_bytes, nullptr);
  p.variant = kDeterministic;
  EXPECT_EQ(kStep.bwd_workspace_bytes(p), 8ull * 32 * 2048 * 4);
  p.variant = kAtomic;
  EXPECT_EQ(kStep.bwd_workspace_bytes(p), 8ull * 32 * 2048 * 4 * (1 + 64));
}

// fp32, head dims above 128 or not a multiple of 8, with and without the backward.
TEST(Step12TensorCoreBackward, RefusesWhatItCannotRun) {
  refuses_what_it_cannot_run(kStep);
  fa::Problem pr;
  pr.family = fa::Family::Attention;
  pr.backward = true;
  pr.attn.dtype = fa::DType::F16;
  EXPECT_EQ(fa::step_supports(kStep, pr), "");
  for (int d : {60, 136}) {
    pr.attn.head_dim = d;
    EXPECT_NE(fa::step_supports(kStep, pr), "") << "head_dim " << d;
  }
  pr.attn.head_dim = 64, pr.attn.dtype = fa::DType::F32;
  EXPECT_NE(fa::step_supports(kStep, pr), "") << "fp32";
}
}  // namespace
