// CPU tests of the harness in harness/: compare (element-wise and per row), the fp16/bf16
// rounding helpers and the per-row bounds, the attention family's inputs and its references on
// sampled rows (attention_inputs.h, attention_reference.h), the CLI parser, the seeded random fill.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <set>
#include <vector>

#include "attention_inputs.h"
#include "attention_reference.h"
#include "check.h"
#include "cli.h"
#include "compare.h"
#include "golden.h"
#include "lowp.h"
#include "random.h"
#include "reference.h"
#include "tolerance.h"

namespace {

const double kNaN = std::numeric_limits<double>::quiet_NaN();
const double kInf = std::numeric_limits<double>::infinity();

// ---- compare --------------------------------------------------------------------------------
TEST(Compare, IdenticalPasses) {
  std::vector<float> a{1, 2, 3};
  std::vector<double> b{1, 2, 3};
  const auto r = fa::compare(a, b, {0, 0});
  EXPECT_TRUE(r.ok());
  EXPECT_EQ(r.mismatches, 0u);
  EXPECT_EQ(r.max_abs_err, 0.0);
}

TEST(Compare, ToleranceIsAtolPlusRtolTimesRef) {
  const std::vector<double> ref{100.0};
  EXPECT_TRUE(fa::compare(std::vector<double>{100.0 + 1.0 + 0.999}, ref, {1.0, 0.01}).ok());
  EXPECT_FALSE(fa::compare(std::vector<double>{100.0 + 1.0 + 1.001}, ref, {1.0, 0.01}).ok());
}

TEST(Compare, PoisonedElementFails) {
  // A NaN left in the output (an element the kernel never wrote) must fail, however loose the
  // tolerance, and be reported with its index.
  std::vector<double> out{1, 2, kNaN, 4, 5, 6}, ref{1, 2, 3, 4, 5, 6};
  const auto r = fa::compare(out, ref, {1e9, 1e9}, {2, 3});
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.mismatches, 1u);
  EXPECT_EQ(r.nonfinite_out, 1u);
  ASSERT_EQ(r.first.size(), 1u);
  EXPECT_EQ(r.first[0].index, 2u);
  EXPECT_NE(r.summary().find("at [0, 2]"), std::string::npos) << r.summary();
}

TEST(Compare, NonFiniteMatchesOnlyTheSameNonFinite) {
  EXPECT_TRUE(fa::compare(std::vector<double>{kNaN, -kInf}, std::vector<double>{kNaN, -kInf}, {0, 0}).ok());
  EXPECT_FALSE(fa::compare(std::vector<double>{0.0}, std::vector<double>{kNaN}, {1, 1}).ok());
  EXPECT_FALSE(fa::compare(std::vector<double>{kInf}, std::vector<double>{-kInf}, {1, 1}).ok());
  EXPECT_FALSE(fa::compare(std::vector<double>{kInf}, std::vector<double>{1.0}, {1, 1}).ok());
}

TEST(Compare, CountsEveryMismatchAndReportsTheFirstFew) {
  std::vector<double> out(100, 1.0), ref(100, 0.0);
  const auto r = fa::compare(out, ref, {0.5, 0});
  EXPECT_EQ(r.mismatches, 100u);
  EXPECT_EQ(r.first.size(), 5u);
  EXPECT_DOUBLE_EQ(r.max_abs_err, 1.0);
  EXPECT_NE(r.summary().find("100 of 100"), std::string::npos);
}

TEST(Compare, RelativeFrobeniusError) {
  const auto r = fa::compare(std::vector<double>{3.0, 4.0 + 0.5}, std::vector<double>{3.0, 4.0}, {1, 0});
  EXPECT_NEAR(r.rel_fro_err, 0.5 / 5.0, 1e-15);
}

TEST(Compare, SizeMismatchOrEmptyFails) {
  EXPECT_FALSE(fa::compare(std::vector<double>{1, 2}, std::vector<double>{1}, {1, 1}).ok());
  EXPECT_FALSE(fa::compare(std::vector<double>{}, std::vector<double>{}, {1, 1}).ok());
}

// ---- compare_rows: one bound per row --------------------------------------------------------
TEST(CompareRows, EachRowAgainstItsOwnBound) {
  // [4 rows, 3 cols]; row 2 is off by 0.5, within row 0's bound (1.0) but not its own (0.1).
  std::vector<float> out(12, 1.f);
  const std::vector<double> ref(12, 1.0), bound{1.0, 0.1, 0.1, 0.1};
  EXPECT_TRUE(fa::compare_rows(out, ref, 3, bound).ok());
  out[2 * 3 + 1] = 1.5f;
  const auto r = fa::compare_rows(out, ref, 3, bound, {1, 4, 3});
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.failed_rows, 1u);
  EXPECT_EQ(r.worst_row, 2u);
  EXPECT_DOUBLE_EQ(r.worst_err, 0.5);
  EXPECT_DOUBLE_EQ(r.worst_bound, 0.1);
  EXPECT_EQ(r.elements.mismatches, 1u);
  const std::string sum = r.summary();
  EXPECT_NE(sum.find("worst row [0, 2]: max|err| 0.5 > 0.1"), std::string::npos) << sum;
  EXPECT_NE(sum.find("1 of 4 rows over their bound"), std::string::npos) << sum;
  EXPECT_NE(sum.find("at [0, 2, 1]: got 1.5"), std::string::npos) << sum;
  // The same error in row 0 passes: its bound is 1.0.
  out[2 * 3 + 1] = 1.f;
  out[0] = 1.5f;
  const auto r0 = fa::compare_rows(out, ref, 3, bound);
  EXPECT_TRUE(r0.ok()) << r0.summary();
  EXPECT_EQ(r0.worst_row, 0u);
  EXPECT_NE(r0.summary().find("PASS"), std::string::npos);
}

TEST(CompareRows, WorstRowIsTheLargestErrorOverBound) {
  std::vector<double> out{0.0, 0.3, 0.0, 0.05}, ref(4, 0.0);  // rows of 1: 0.3/1.0 < 0.05/0.01
  const auto r = fa::compare_rows(out, ref, 1, {1.0, 1.0, 1.0, 0.01});
  EXPECT_EQ(r.worst_row, 3u);
  EXPECT_DOUBLE_EQ(r.elements.max_abs_err, 0.3);
  EXPECT_DOUBLE_EQ(r.min_bound, 0.01);
  EXPECT_DOUBLE_EQ(r.elements.tol.atol, 1.0);
}

TEST(CompareRows, PoisonedRowFailsAndIsTheWorst) {
  std::vector<float> out(6, 0.f);
  out[4] = NAN;
  const auto r = fa::compare_rows(out, std::vector<double>(6, 0.0), 2, {1e9, 1e9, 1e9});
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.worst_row, 2u);
  EXPECT_EQ(r.elements.nonfinite_out, 1u);
}

TEST(CompareRows, SampledRowsAreNamedByTheirRealIndex) {
  // Rows 5 and 9 of a [2, 8, 2] result (shape {2, 8, 2}), compared as a gathered [2, 2].
  const std::vector<double> out{0, 0, 0, 3}, ref(4, 0.0);
  const auto r = fa::compare_rows(out, ref, 2, {1.0, 1.0}, {2, 8, 2}, {5, 9});
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.worst_row, 9u);
  EXPECT_NE(r.summary().find("worst row [1, 1]"), std::string::npos) << r.summary();
  EXPECT_NE(r.summary().find("at [1, 1, 1]: got 3"), std::string::npos) << r.summary();
}

TEST(CompareRows, SizeMismatchFails) {
  EXPECT_FALSE(fa::compare_rows(std::vector<double>{1, 2, 3}, std::vector<double>{1, 2, 3}, 2, {1.0, 1.0}).ok());
  EXPECT_FALSE(fa::compare_rows(std::vector<double>{}, std::vector<double>{}, 2, {}).ok());
  EXPECT_FALSE(fa::compare_rows(std::vector<double>{1, 2}, std::vector<double>{1, 2}, 1, {1.0, 1.0}, {}, {0}).ok());
}

// ---- fp16 / bf16 rounding -------------------------------------------------------------------
using fa::DType;

TEST(Lowp, RoundToNearestTiesToEven) {
  // f16 keeps 10 fraction bits: 1 + 2^-11 is halfway between 1 and 1 + 2^-10.
  EXPECT_EQ(fa::round_to(DType::F16, 1.0f + 0x1p-11f), 1.0f);                        // tie: to even (1)
  EXPECT_EQ(fa::round_to(DType::F16, 1.0f + 3 * 0x1p-11f), 1.0f + 0x1p-9f);          // tie: to even
  EXPECT_EQ(fa::round_to(DType::F16, 1.0f + 0x1p-11f + 0x1p-20f), 1.0f + 0x1p-10f);  // above the tie
  EXPECT_EQ(fa::round_to(DType::F16, -(1.0f + 0x1p-11f + 0x1p-20f)), -(1.0f + 0x1p-10f));
  // bf16 keeps 7: 1 + 2^-8 is the tie.
  EXPECT_EQ(fa::round_to(DType::BF16, 1.0f + 0x1p-8f), 1.0f);
  EXPECT_EQ(fa::round_to(DType::BF16, 1.0f + 3 * 0x1p-8f), 1.0f + 0x1p-6f);
  EXPECT_EQ(fa::round_to(DType::BF16, 1.0f + 0x1p-8f + 0x1p-20f), 1.0f + 0x1p-7f);
  EXPECT_EQ(fa::round_to(DType::BF16, 3.14159265f), 3.140625f);
  EXPECT_EQ(fa::round_to(DType::F32, 1.0f + 0x1p-11f), 1.0f + 0x1p-11f);  // f32: unchanged
  // Values of the type are kept exactly.
  for (float x : {0.5f, -2.0f, 65504.0f, 0x1p-24f, 1.0f + 0x1p-10f}) EXPECT_EQ(fa::round_to(DType::F16, x), x) << x;
}

TEST(Lowp, DoublesRoundOnceNotThroughFloat) {
  // Just above an f16 tie by 2^-40: through float it would land on the tie and go to even (1).
  const double x = 1.0 + 0x1p-11 + 0x1p-40;
  EXPECT_EQ(fa::round_to(DType::F16, x), 1.0 + 0x1p-10);
  EXPECT_EQ(fa::round_to(DType::BF16, 1.0 + 0x1p-8 + 0x1p-40), 1.0 + 0x1p-7);
  EXPECT_EQ(fa::rounding(DType::F16)(x), 1.0 + 0x1p-10);
  EXPECT_EQ(fa::rounding(DType::BF16)(0.1), double(fa::round_to(DType::BF16, 0.1f)));
}

TEST(Lowp, OverflowSubnormalsInfAndNan) {
  const float inf = INFINITY;
  EXPECT_EQ(fa::round_to(DType::F16, 65519.0f), 65504.0f);  // below the tie with 65536: max finite
  EXPECT_EQ(fa::round_to(DType::F16, 65520.0f), inf);       // the tie: to even, which is inf
  EXPECT_EQ(fa::round_to(DType::F16, -1e6f), -inf);
  EXPECT_TRUE(std::isfinite(fa::round_to(DType::BF16, 3e38f)));     // bf16 has fp32's exponent range
  EXPECT_EQ(fa::round_to(DType::F16, 0x1p-25f), 0.0f);              // half the smallest subnormal: to 0
  EXPECT_EQ(fa::round_to(DType::F16, 3 * 0x1p-26f), 0x1p-24f);      // above it
  EXPECT_EQ(fa::round_to(DType::F16, 3 * 0x1p-25f), 2 * 0x1p-24f);  // tie between 1 and 2 ulps: even
  for (DType t : {DType::F16, DType::BF16}) {
    EXPECT_EQ(fa::round_to(t, inf), inf);
    EXPECT_EQ(fa::round_to(t, -inf), -inf);
    EXPECT_TRUE(std::isnan(fa::round_to(t, NAN)));
    EXPECT_TRUE(std::isnan(fa::round_to(t, double(NAN))));
    EXPECT_TRUE(std::signbit(fa::round_to(t, -0.0f)));
    // The NaN poison of DeviceBuffer/DeviceTensor (all bytes 0xFF) is a NaN in both.
    EXPECT_TRUE(std::isnan(fa::from_bits(t, 0xFFFF))) << fa::dtype_name(t);
  }
  EXPECT_EQ(fa::to_bits(DType::F16, 1.0f), 0x3C00);
  EXPECT_EQ(fa::to_bits(DType::BF16, 1.0f), 0x3F80);
  EXPECT_EQ(fa::from_bits(DType::F16, 0x7BFF), 65504.0f);
  EXPECT_THROW(fa::to_bits(DType::F32, 1.0f), fa::Error);
}

// The harness's conversions are its own (inlined in the loops over a decode sweep's caches); they must give the
// bits of the CUDA host functions they replaced. Every sign and float exponent, each with fraction patterns at
// and around every possible rounding position (below, at and above the half, with the kept part even, odd and
// all ones), plus 2^22 patterns from a stride through all 2^32 (FA_LOWP_EXHAUSTIVE=1: every one of the 2^32, about
// a minute on one core): the same fp16 and bf16 bits; and every 16-bit pattern back to the same float bits.
TEST(Lowp, ConversionsGiveTheCudaHostFunctionsBits) {
  auto float_of = [](std::uint32_t u) {
    float x;
    std::memcpy(&x, &u, sizeof x);
    return x;
  };
  auto same = [&](std::uint32_t u) {
    const float x = float_of(u);
    ASSERT_EQ(fa::to_bits(DType::F16, x), __half_raw(__float2half_rn(x)).x) << std::hex << u;
    ASSERT_EQ(fa::to_bits(DType::BF16, x), __nv_bfloat16_raw(__float2bfloat16_rn(x)).x) << std::hex << u;
  };
  std::size_t checked = 0;
  for (std::uint32_t top = 0; top < 512; ++top) {  // sign and exponent
    std::vector<std::uint32_t> fractions{0, 1, 0x7FFFFF, 0x400000};
    for (int r = 0; r < 23; ++r) {
      const std::uint32_t half = 1u << r, low = (half << 1) - 1;
      for (std::uint32_t f : {half - 1, half, half + 1, half | (half << 1), (half - 1) | (half << 1), low, ~low})
        fractions.push_back(f & 0x7FFFFF);
    }
    for (std::uint32_t f : fractions) same((top << 23) | f), ++checked;
  }
  const char* all = std::getenv("FA_LOWP_EXHAUSTIVE");
  const std::uint64_t stride = all && std::string(all) == "1" ? 1 : 1021;  // 1021: a prime
  for (std::uint64_t u = 0; u < (1ull << 32); u += stride) same(std::uint32_t(u)), ++checked;
  EXPECT_GT(checked, std::size_t(4) << 20);
  for (std::uint32_t h = 0; h < 65536; ++h) {
    __half_raw r16;
    __nv_bfloat16_raw rb;
    r16.x = rb.x = std::uint16_t(h);
    const float f16 = fa::from_bits(DType::F16, std::uint16_t(h)), bf16 = fa::from_bits(DType::BF16, std::uint16_t(h));
    const float cuda16 = __half2float(__half(r16)), cudabf = __bfloat162float(__nv_bfloat16(rb));
    ASSERT_EQ(std::memcmp(&f16, &cuda16, sizeof f16), 0) << std::hex << h;
    ASSERT_EQ(std::memcmp(&bf16, &cudabf, sizeof bf16), 0) << std::hex << h;
  }
}

TEST(Lowp, RoundsVectorsInPlace) {
  std::vector<float> v{1.0f + 0x1p-11f + 0x1p-20f, 0.1f}, w = v;
  fa::round_to(DType::F16, v);
  EXPECT_EQ(v[0], 1.0f + 0x1p-10f);
  EXPECT_EQ(v[1], fa::round_to(DType::F16, 0.1f));
  fa::round_to(DType::F32, w);
  EXPECT_EQ(w[1], 0.1f);
}

TEST(Lowp, UlpIsTheSpacingOfTheType) {
  EXPECT_EQ(fa::ulp(DType::F16, 1.0), 0x1p-10);
  EXPECT_EQ(fa::ulp(DType::F16, 1.999), 0x1p-10);
  EXPECT_EQ(fa::ulp(DType::F16, 2.0), 0x1p-9);
  EXPECT_EQ(fa::ulp(DType::F16, 0.3), 0x1p-12);
  EXPECT_EQ(fa::ulp(DType::F16, -0.3), 0x1p-12);
  EXPECT_EQ(fa::ulp(DType::F16, 1e-7), 0x1p-24);  // subnormal spacing
  EXPECT_EQ(fa::ulp(DType::F16, 0.0), 0x1p-24);
  EXPECT_EQ(fa::ulp(DType::BF16, 1.0), 0x1p-7);
  EXPECT_EQ(fa::ulp(DType::BF16, 40.0), 0x1p-2);
  EXPECT_EQ(fa::ulp(DType::BF16, 0.0), 0x1p-133);
  EXPECT_EQ(fa::ulp(DType::F32, 1.0), 0x1p-23);
  // The next value up is x + ulp, and the midpoint rounds to even.
  EXPECT_EQ(fa::round_to(DType::F16, 3.0 + fa::ulp(DType::F16, 3.0)), 3.0 + 0x1p-9);
}

TEST(LowpTolerance, RowBoundIsTwiceTheLowpErrorPlusOneUlp) {
  // Two rows of 2: row 0 |ref| up to 1.5 with ref_lowp off by 0.002; row 1 exact (ref_lowp == ref).
  const std::vector<double> ref{1.5, -0.5, 0.25, 0.3}, lowp{1.5, -0.502, 0.25, 0.3};
  const std::vector<double> b = fa::lowp_row_bounds(ref, lowp, 2, DType::F16);
  ASSERT_EQ(b.size(), 2u);
  EXPECT_DOUBLE_EQ(b[0], 2 * 0.002 + 0x1p-10 + fa::tol::kUnderflowFloor);  // ulp at 1.5
  EXPECT_DOUBLE_EQ(b[1], 0x1p-12 + fa::tol::kUnderflowFloor);              // ulp at 0.3: the floors alone
  EXPECT_EQ(fa::tol::kUnderflowFloor, 0x1p-100);
  EXPECT_EQ(fa::tol::kLowpErrFactor, 2.0);
}

TEST(LowpTolerance, RowBoundAddsWhatDeltaFromTheGivenOMoves) {
  // The same two rows; ref_given (delta from the given O) moves row 0 by 0.003 and row 1 by 0.001.
  const std::vector<double> ref{1.5, -0.5, 0.25, 0.3}, lowp{1.5, -0.502, 0.25, 0.3}, given{1.503, -0.5, 0.25, 0.299};
  const std::vector<double> b = fa::lowp_row_bounds(ref, lowp, 2, DType::F16, &given);
  ASSERT_EQ(b.size(), 2u);
  EXPECT_NEAR(b[0], 2 * 0.002 + 0x1p-10 + 0.003 + fa::tol::kUnderflowFloor, 1e-15);
  EXPECT_NEAR(b[1], 0x1p-12 + 0.001 + fa::tol::kUnderflowFloor, 1e-15);
  const std::vector<double> none;  // no given O (a forward, or dV): the bound without the term
  EXPECT_EQ(fa::lowp_row_bounds(ref, lowp, 2, DType::F16, &none), fa::lowp_row_bounds(ref, lowp, 2, DType::F16));
}

// Against a previous step with another O: each row adds max_j |ref_prev_ij − ref_ij| to the bound
// it is given (and nothing where ref_prev = ref).
TEST(LowpTolerance, PreviousStepsOAddsWhatItsDeltaMoves) {
  const std::vector<double> ref{1.5, -0.5, 0.25, 0.3}, prev{1.5, -0.504, 0.25, 0.3}, lowp{1.5, -0.502, 0.25, 0.3};
  std::vector<double> b = fa::lowp_row_bounds(ref, lowp, 2, DType::F16);
  const std::vector<double> before = b;
  fa::add_from_prev_o(b, ref, prev, 2);
  ASSERT_EQ(b.size(), 2u);
  EXPECT_NEAR(b[0], before[0] + 0.004, 1e-15);
  EXPECT_EQ(b[1], before[1]);
  fa::add_from_prev_o(b, ref, ref, 2);
  EXPECT_NEAR(b[0], before[0] + 0.004, 1e-15);
}

// Gradients add fp32's cancellation floor to every row: a row that is exactly 0 in both ref and
// ref_lowp (dP = delta with one visible key) gets a bound of that floor, not of ~0.
TEST(LowpTolerance, GradientRowBoundHasTheFp32CancellationFloor) {
  const std::vector<double> ref{0, 0, 1.5, -0.5}, lowp{0, 0, 1.5, -0.502};
  const std::vector<double> plain = fa::lowp_row_bounds(ref, lowp, 2, DType::BF16),
                            grad = fa::lowp_row_bounds(ref, lowp, 2, DType::BF16, nullptr, fa::tol::kAttnGradAtolFloor);
  ASSERT_EQ(grad.size(), 2u);
  EXPECT_LT(plain[0], 1e-20);
  EXPECT_EQ(grad[0], plain[0] + fa::tol::kAttnGradAtolFloor);
  EXPECT_EQ(grad[1], plain[1] + fa::tol::kAttnGradAtolFloor);
}

// ---- attention inputs and sampled references ---------------------------------------------------
fa::AttnParams attn(int batch, int heads, int seq_q, int seq_k, int d, bool causal, DType t) {
  fa::AttnParams a;
  a.batch = batch, a.heads = heads, a.seq_q = seq_q, a.seq_k = seq_k, a.head_dim = d;
  a.scale = float(1 / std::sqrt(double(d))), a.causal = causal, a.dtype = t;
  return a;
}

TEST(AttentionInputs, RoundedOffsetAndOneLargeRow) {
  const fa::AttnParams a = attn(2, 3, 5, 7, 8, false, DType::BF16);
  const fa::attention::Inputs in = fa::attention::make_inputs(a, true, 123),
                              no_dout = fa::attention::make_inputs(a, false, 123);
  ASSERT_EQ(in.q.size(), fa::attention::q_elems(a));
  ASSERT_EQ(in.k.size(), fa::attention::k_elems(a));
  ASSERT_EQ(in.dout.size(), fa::attention::q_elems(a));
  EXPECT_TRUE(no_dout.dout.empty());
  EXPECT_EQ(no_dout.q, in.q);  // dO drawn or not, Q, K, V are the same
  for (const auto* t : {&in.q, &in.k, &in.v, &in.dout})
    for (float x : *t) ASSERT_EQ(fa::round_to(DType::BF16, x), x);
  for (std::size_t i = 0; i < in.k.size(); ++i) ASSERT_TRUE(in.k[i] >= -0.5f && in.k[i] <= 1.5f) << i;
  double row1 = 0, row2 = 0;  // row 1 of head 0 is 20x larger
  for (int d = 0; d < a.head_dim; ++d) row1 += std::fabs(in.q[8 + d]), row2 += std::fabs(in.q[16 + d]);
  EXPECT_GT(row1, 5 * row2);
}

// --inputs randn: Q, K, V and dO standard normal (rounded to the type), drawn from the same seed
// reproducibly and unlike the uniform inputs; Q, K, V the same with or without dO; row 1 of head 0
// still 20x larger.
TEST(AttentionInputs, RandnIsStandardNormalRoundedWithTheLargeRow) {
  using fa::attention::InputDist;
  const fa::AttnParams a = attn(4, 8, 64, 96, 64, false, DType::F16);
  const fa::attention::Inputs in = fa::attention::make_inputs(a, true, 5, {}, InputDist::Randn),
                              again = fa::attention::make_inputs(a, true, 5, {}, InputDist::Randn),
                              no_dout = fa::attention::make_inputs(a, false, 5, {}, InputDist::Randn),
                              uniform = fa::attention::make_inputs(a, true, 5);
  EXPECT_EQ(in.q, again.q);
  EXPECT_EQ(in.dout, again.dout);
  EXPECT_EQ(no_dout.k, in.k);
  EXPECT_NE(in.q, uniform.q);
  EXPECT_STREQ(fa::attention::input_dist_name(InputDist::Randn), "randn");
  EXPECT_STREQ(fa::attention::input_dist_name(InputDist::Uniform), "uniform");
  const std::size_t skip = 2 * a.head_dim;  // Q: rows 0 and 1 of head 0 left out (row 1 is 20x)
  for (const auto* t : {&in.q, &in.k, &in.v, &in.dout}) {
    double sum = 0, sum2 = 0;
    const std::size_t first = t == &in.q ? skip : 0;
    for (std::size_t i = 0; i < t->size(); ++i) {
      ASSERT_EQ(fa::round_to(DType::F16, (*t)[i]), (*t)[i]) << i;
      if (i >= first) sum += (*t)[i], sum2 += double((*t)[i]) * (*t)[i];
    }
    const double n = double(t->size() - first), mean = sum / n;
    EXPECT_NEAR(mean, 0.0, 0.02);  // n >= 131072: sampling error ~0.003
    EXPECT_NEAR(std::sqrt(sum2 / n - mean * mean), 1.0, 0.02);
  }
  double row1 = 0, row2 = 0;
  for (int d = 0; d < a.head_dim; ++d)
    row1 += std::fabs(in.q[a.head_dim + d]), row2 += std::fabs(in.q[2 * a.head_dim + d]);
  EXPECT_GT(row1, 5 * row2);
}

// The fp16/bf16 rule of --check (tolerance.h) with randn inputs: a CPU stand-in for a FlashAttention
// forward (S and the online softmax in fp32, P rounded to the type for P·V, O accumulated in fp32 and
// rounded once) passes the per-row bound of reference_rows on every row, as it does on uniform
// inputs; the same stand-in with P off by 2^-7 (an error ~8 ulps of fp16, a fraction of bf16's)
// fails it in f16. So randn needs no other tolerance: ref_lowp, the bound's measure, is drawn on the
// same inputs and scales with them. The worst row's error over its bound is printed for both inputs.
std::vector<double> flash_like_rows(const fa::AttnParams& a, const fa::attention::Inputs& in,
                                    const std::vector<std::size_t>& rows, double p_error) {
  const std::size_t D = a.head_dim;
  std::vector<double> out;
  std::vector<float> s(a.seq_k), o(D);
  for (std::size_t r : rows) {
    const std::size_t h = r / a.seq_q, i = r % a.seq_q;
    const float* q = &in.q[r * D];
    const std::size_t n = a.causal ? std::min<std::size_t>(i + 1, a.seq_k) : a.seq_k;
    float m = -INFINITY, l = 0;
    for (std::size_t j = 0; j < n; ++j) {
      const float* k = &in.k[(h * a.seq_k + j) * D];
      float dot = 0;
      for (std::size_t d = 0; d < D; ++d) dot += q[d] * k[d];
      s[j] = dot * a.scale;
      m = std::max(m, s[j]);
    }
    std::fill(o.begin(), o.end(), 0.f);
    for (std::size_t j = 0; j < n; ++j) {
      const float p = std::exp(s[j] - m);
      l += p;
      const float pl = float(fa::round_to(a.dtype, p * (1 + p_error)));  // P in the type for P·V
      const float* v = &in.v[(h * a.seq_k + j) * D];
      for (std::size_t d = 0; d < D; ++d) o[d] += pl * v[d];
    }
    for (std::size_t d = 0; d < D; ++d) out.push_back(fa::round_to(a.dtype, o[d] / l));
  }
  return out;
}

TEST(LowpTolerance, RandnInputsKeepTheRowRuleMeaningful) {
  using fa::attention::InputDist;
  for (DType t : {DType::F16, DType::BF16})
    for (bool causal : {false, true})
      for (InputDist dist : {InputDist::Uniform, InputDist::Randn}) {
        const fa::AttnParams a = attn(1, 2, 300, 300, 64, causal, t);
        const fa::attention::Inputs in = fa::attention::make_inputs(a, false, 17, {}, dist);
        std::vector<std::size_t> rows(fa::attention::rows(a));
        for (std::size_t i = 0; i < rows.size(); ++i) rows[i] = i;
        const fa::attention::RowRef ref = fa::attention::reference_rows(a, in, rows);
        const std::vector<double> bound = fa::lowp_row_bounds(ref.o, ref.o_lowp, a.head_dim, t);
        auto worst = [&](const std::vector<double>& o) {
          double w = 0;  // the largest row error over its bound
          for (std::size_t r = 0; r < rows.size(); ++r) {
            double e = 0;
            for (int d = 0; d < a.head_dim; ++d)
              e = std::max(e, std::fabs(o[r * a.head_dim + d] - ref.o[r * a.head_dim + d]));
            w = std::max(w, e / bound[r]);
          }
          return w;
        };
        const double good = worst(flash_like_rows(a, in, rows, 0)), bad = worst(flash_like_rows(a, in, rows, 0x1p-7));
        const std::string what =
            std::string(fa::dtype_name(t)) + (causal ? " causal " : " ") + fa::attention::input_dist_name(dist);
        std::printf("  %-22s worst row error / bound: %.3f (P off by 2^-7: %.3f)\n", what.c_str(), good, bad);
        EXPECT_LE(good, 1.0) << what;
        if (t == DType::F16) EXPECT_GT(bad, 1.0) << what;
      }
}

// Grouped-query attention: query head h of batch b reads K/V head b·KVH + h / (H / KVH). The fp64
// references (whole heads and sampled rows) equal, to the bit, those of the same problem with each
// K/V head copied out for every query head of its group (MHA, repeat_kv_heads).
TEST(AttentionReference, GroupedQueryHeadsReadTheirGroupsKvHead) {
  for (int kvh : {1, 2, 3})
    for (bool causal : {false, true}) {
      SCOPED_TRACE("kv_heads " + std::to_string(kvh) + (causal ? ", causal" : ""));
      fa::AttnParams g = attn(2, 6, 9, 13, 16, causal, DType::F16);
      g.kv_heads = kvh;
      const fa::attention::Inputs in = fa::attention::make_inputs(g, false, 11 + kvh);
      const std::size_t ks = 13 * 16, qs = 9 * 16;
      ASSERT_EQ(in.k.size(), 2 * kvh * ks);
      fa::AttnParams m = g;
      m.kv_heads = 0;
      const fa::attention::Inputs rep = fa::attention::repeat_kv_heads(g, in);
      ASSERT_EQ(rep.k.size(), 2 * 6 * ks);
      for (std::size_t b = 0; b < 2; ++b)
        for (std::size_t h = 0; h < 6; ++h) {
          const std::size_t src = b * kvh + h / (6 / kvh), dst = b * 6 + h;
          EXPECT_EQ(fa::attention::kv_head_of(g, dst), src);
          EXPECT_TRUE(std::equal(in.k.begin() + src * ks, in.k.begin() + (src + 1) * ks, rep.k.begin() + dst * ks));
          EXPECT_TRUE(std::equal(in.v.begin() + src * ks, in.v.begin() + (src + 1) * ks, rep.v.begin() + dst * ks));
        }
      const std::vector<std::size_t> all{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};
      const fa::attention::HeadRef hg = fa::attention::reference_heads(g, false, in, all),
                                   hm = fa::attention::reference_heads(m, false, rep, all);
      EXPECT_EQ(hg.o, hm.o);
      EXPECT_EQ(hg.lse, hm.lse);
      const std::vector<std::size_t> rows{0, 8, 9 * 5 + 3, 9 * 11 + 8};
      const fa::attention::RowRef rg = fa::attention::reference_rows(g, in, rows),
                                  rm = fa::attention::reference_rows(m, rep, rows);
      EXPECT_EQ(rg.o, rm.o);
      EXPECT_EQ(rg.o_lowp, rm.o_lowp);
      EXPECT_EQ(rg.lse, rm.lse);
      for (std::size_t i = 0; i < rows.size(); ++i)  // and the rows are those of the whole heads
        for (std::size_t d = 0; d < 16; ++d) EXPECT_EQ(rg.o[i * 16 + d], hg.o[rows[i] / 9 * qs + rows[i] % 9 * 16 + d]);
    }
}

// The backward of grouped-query attention: dQ per query head as in MHA, dK and dV of a K/V head
// the sum of its query heads' terms. Against the same problem with K/V repeated per query head
// (MHA), summed over each group in ascending order: equal to the bit, on whole heads (a K/V head
// of a single chosen query head still sums its whole group) and on sampled rows (fp64, low
// precision and from a given O).
TEST(AttentionReference, GroupedQueryBackwardSumsEachGroup) {
  for (int kvh : {1, 2})
    for (bool causal : {false, true}) {
      SCOPED_TRACE("kv_heads " + std::to_string(kvh) + (causal ? ", causal" : ""));
      const std::size_t H = 4, B = 2, Sq = 7, Sk = 10, D = 8, qs = Sq * D, ks = Sk * D, G = H / kvh;
      fa::AttnParams g = attn(int(B), int(H), int(Sq), int(Sk), int(D), causal, DType::BF16);
      g.kv_heads = kvh;
      fa::attention::Inputs in = fa::attention::make_inputs(g, true, 21 + kvh);
      fa::AttnParams m = g;
      m.kv_heads = 0;
      fa::attention::Inputs rep = fa::attention::repeat_kv_heads(g, in);
      auto group_sum = [&](const std::vector<double>& per_head, std::size_t kv, std::size_t n) {
        std::vector<double> sum(per_head.begin() + (kv / kvh * H + kv % kvh * G) * n,
                                per_head.begin() + (kv / kvh * H + kv % kvh * G + 1) * n);
        for (std::size_t i = 1; i < G; ++i)
          for (std::size_t e = 0; e < n; ++e) sum[e] += per_head[(kv / kvh * H + kv % kvh * G + i) * n + e];
        return sum;
      };
      std::vector<std::size_t> all(B * H);
      for (std::size_t h = 0; h < all.size(); ++h) all[h] = h;
      const fa::attention::HeadRef hg = fa::attention::reference_heads(g, true, in, all),
                                   hm = fa::attention::reference_heads(m, true, rep, all);
      EXPECT_EQ(hg.kv_heads.size(), B * kvh);
      EXPECT_EQ(hg.dq, hm.dq);
      EXPECT_EQ(hg.o, hm.o);
      for (std::size_t kv = 0; kv < B * kvh; ++kv) {
        EXPECT_EQ(std::vector<double>(hg.dk.begin() + kv * ks, hg.dk.begin() + (kv + 1) * ks), group_sum(hm.dk, kv, ks));
        EXPECT_EQ(std::vector<double>(hg.dv.begin() + kv * ks, hg.dv.begin() + (kv + 1) * ks), group_sum(hm.dv, kv, ks));
      }
      const fa::attention::HeadRef one = fa::attention::reference_heads(g, true, in, {H + 1});  // batch 1, head 1
      ASSERT_EQ(one.kv_heads, (std::vector<std::size_t>{kvh + 1 / G}));
      EXPECT_EQ(one.dk, group_sum(hm.dk, kvh + 1 / G, ks));
      EXPECT_EQ(one.dq, std::vector<double>(hm.dq.begin() + (H + 1) * qs, hm.dq.begin() + (H + 2) * qs));

      in.o.assign(B * H * qs, 0.f);  // a given O: the forward's, in the element type
      for (std::size_t e = 0; e < in.o.size(); ++e) in.o[e] = fa::round_to(DType::BF16, float(hm.o[e]));
      rep.o = in.o;
      const std::vector<std::size_t> q_rows{0, 1, 9, Sq * 5 + 6};
      std::vector<std::size_t> k_rows, k_rows_mha;  // key row j of K/V head kv, and of each query head in its group
      for (std::size_t kv = 0; kv < B * kvh; ++kv)
        for (std::size_t j : {std::size_t(0), Sk - 1, (3 * kv + 2) % Sk}) {
          k_rows.push_back(kv * Sk + j);
          for (std::size_t i = 0; i < G; ++i) k_rows_mha.push_back((kv / kvh * H + kv % kvh * G + i) * Sk + j);
        }
      const fa::attention::BwdRowRef rg = fa::attention::reference_bwd_rows(g, in, q_rows, k_rows),
                                     rm = fa::attention::reference_bwd_rows(m, rep, q_rows, k_rows_mha);
      EXPECT_EQ(rg.dq, rm.dq);
      EXPECT_EQ(rg.dq_lowp, rm.dq_lowp);
      EXPECT_EQ(rg.dq_given, rm.dq_given);
      for (auto [mine, theirs] : {std::pair{&rg.dk, &rm.dk}, std::pair{&rg.dk_lowp, &rm.dk_lowp},
                                  std::pair{&rg.dv, &rm.dv}, std::pair{&rg.dv_lowp, &rm.dv_lowp},
                                  std::pair{&rg.dk_given, &rm.dk_given}}) {
        ASSERT_EQ(mine->size(), k_rows.size() * D);
        for (std::size_t t = 0; t < k_rows.size(); ++t)
          for (std::size_t e = 0; e < D; ++e) {
            double sum = (*theirs)[(t * G) * D + e];
            for (std::size_t i = 1; i < G; ++i) sum += (*theirs)[(t * G + i) * D + e];
            EXPECT_EQ((*mine)[t * D + e], sum) << "key row " << k_rows[t] << ", element " << e;
          }
      }
    }
}

// A KV cache: sequence b has seq_lens[b] keys of the capacity seq_k, the rows past it NaN in the
// inputs (make_inputs); causal aligns query i with key len − seq_q + i. Each query row of the
// references (whole heads, and fp64 and low-precision rows) equals, to the bit, the plain
// (non-causal) reference of its one head over exactly the keys it sees; a sequence of length 0
// (not causal) has O = 0 and LSE = −inf. Backward references refuse a KV cache.
TEST(AttentionReference, KvCacheReadsEachSequencesKeysAlignedToItsEnd) {
  for (bool causal : {false, true}) {
    SCOPED_TRACE(causal ? "causal" : "not causal");
    const int B = 3, H = 4, KVH = 2, Sq = 3, Sk = 20, D = 8;
    fa::AttnParams a = attn(B, H, Sq, Sk, D, causal, DType::F16);
    a.kv_heads = KVH, a.kv_cache = true;
    const std::vector<int> lens = causal ? std::vector<int>{3, 20, 11} : std::vector<int>{0, 20, 7};
    const fa::attention::Inputs in = fa::attention::make_inputs(a, false, 77, lens);
    ASSERT_EQ(in.seq_lens, lens);
    for (int b = 0; b < B; ++b)  // the rows past a sequence's length are NaN, the others not
      for (int j = 0; j < Sk; ++j)
        EXPECT_EQ(std::isnan(in.k[((std::size_t(b) * KVH + 1) * Sk + j) * D]), j >= lens[b]) << b << ", " << j;
    std::vector<std::size_t> heads(B * H), rows(B * H * Sq);
    for (std::size_t i = 0; i < heads.size(); ++i) heads[i] = i;
    for (std::size_t i = 0; i < rows.size(); ++i) rows[i] = i;
    const fa::attention::HeadRef hr = fa::attention::reference_heads(a, false, in, heads);
    const fa::attention::RowRef rr = fa::attention::reference_rows(a, in, rows);
    for (std::size_t h = 0; h < heads.size(); ++h)
      for (int i = 0; i < Sq; ++i) {
        const int len = lens[h / H], n = causal ? len - Sq + i + 1 : len;  // the keys row i sees
        const std::size_t g = fa::attention::kv_head_of(a, h), r = h * Sq + i;
        const ref::AttnShape one{1, 1, Sq, n, D, double(a.scale), false};
        std::vector<double> o(D), o_lowp(D);
        double lse = 0, lse_lowp = 0;
        ref::attention_forward_rows(one, &in.q[h * Sq * D], &in.k[g * Sk * D], &in.v[g * Sk * D], &i, 1, nullptr,
                                    o.data(), &lse);
        ref::attention_forward_rows(one, &in.q[h * Sq * D], &in.k[g * Sk * D], &in.v[g * Sk * D], &i, 1,
                                    fa::rounding(DType::F16), o_lowp.data(), &lse_lowp);
        EXPECT_EQ(std::vector<double>(hr.o.begin() + r * D, hr.o.begin() + (r + 1) * D), o) << "head " << h << " row " << i;
        EXPECT_EQ(hr.lse[r], lse);
        EXPECT_EQ(std::vector<double>(rr.o.begin() + r * D, rr.o.begin() + (r + 1) * D), o);
        EXPECT_EQ(std::vector<double>(rr.o_lowp.begin() + r * D, rr.o_lowp.begin() + (r + 1) * D), o_lowp);
        EXPECT_EQ(rr.lse[r], lse);
        if (n == 0) {
          EXPECT_EQ(lse, -std::numeric_limits<double>::infinity());
          EXPECT_EQ(o, std::vector<double>(D, 0.0));
        }
      }
    EXPECT_THROW(fa::attention::reference_heads(a, true, in, {0}), fa::UsageError);
  }
  fa::AttnParams c = attn(2, 1, 4, 8, 8, true, DType::F16);
  c.kv_cache = true;
  for (const std::vector<int>& bad : {std::vector<int>{8, 3}, std::vector<int>{9, 8}, std::vector<int>{-1, 8},
                                      std::vector<int>{8}})
    EXPECT_THROW(fa::attention::make_inputs(c, false, 1, bad), fa::UsageError);
}

// The golden cases of grouped-query attention (forward and backward: dK, dV summed over each group)
// and of a KV cache (forward: per-sequence lengths, causal at each sequence's end), written by
// reference/make_reference.py with NumPy, against the harness's fp64 references on every head, by
// the rule of tests/golden.h.
// A paged KV cache (page_inputs): every page of the pool named at most once by the shuffled block table,
// the rows a length covers holding exactly the contiguous K and V, every other row of the pool NaN, and
// the K and V read back through the table (what the references read) equal to the contiguous ones,
// NaN past each length. Page sizes 1 (a page per key), one that divides no length, and one above every length.
TEST(AttentionInputs, PagedCacheHoldsEachKeyOnceThroughAShuffledTable) {
  const int B = 3, H = 4, KVH = 2, Sq = 1, Sk = 37, D = 8;
  fa::AttnParams a = attn(B, H, Sq, Sk, D, false, DType::F16);
  a.kv_heads = KVH, a.kv_cache = true;
  const std::vector<int> lens{37, 0, 20};
  for (int page : {1, 16, 64}) {
    SCOPED_TRACE("page size " + std::to_string(page));
    const fa::AttnParams p = fa::attention::paged_params(a, lens, page);
    ASSERT_EQ(p.max_pages, std::max(1, (37 + page - 1) / page));
    ASSERT_EQ(p.num_pages, (37 + page - 1) / page + (20 + page - 1) / page + 3);  // 3 spare pages
    const fa::attention::Inputs plain = fa::attention::make_inputs(p, false, 5, lens);
    fa::attention::Inputs in = plain;
    fa::attention::page_inputs(p, in, 9);
    ASSERT_EQ(in.block_table.size(), std::size_t(B) * p.max_pages);
    std::set<int> named;
    for (int b = 0; b < B; ++b)
      for (int j = 0; j < p.max_pages; ++j) {
        const int e = in.block_table[b * p.max_pages + j];
        if (j < (lens[b] + page - 1) / page) {
          EXPECT_TRUE(e >= 0 && e < p.num_pages) << b << ", " << j;
          EXPECT_TRUE(named.insert(e).second) << "page " << e << " named twice";
        } else {
          EXPECT_EQ(e, -1);
        }
      }
    std::vector<bool> covered(std::size_t(p.num_pages) * page, false);  // (page, row) a length covers
    for (int b = 0; b < B; ++b)
      for (int j = 0; j < lens[b]; ++j) {
        const std::size_t pg = std::size_t(in.block_table[b * p.max_pages + j / page]), row = pg * page + j % page;
        covered[row] = true;
        for (int h = 0; h < KVH; ++h)
          for (int d = 0; d < D; ++d) {
            const std::size_t logical = ((std::size_t(b) * KVH + h) * Sk + j) * D + d, paged = (row * KVH + h) * D + d;
            EXPECT_EQ(in.k_pages[paged], plain.k[logical]);
            EXPECT_EQ(in.v_pages[paged], plain.v[logical]);
          }
      }
    for (std::size_t row = 0; row < covered.size(); ++row)
      if (!covered[row]) EXPECT_TRUE(std::isnan(in.k_pages[row * KVH * D]) && std::isnan(in.v_pages[row * KVH * D])) << row;
    for (std::size_t i = 0; i < plain.k.size(); ++i) {  // read back: equal, NaN where NaN (past the lengths)
      EXPECT_EQ(std::isnan(in.k[i]), std::isnan(plain.k[i])) << i;
      if (!std::isnan(plain.k[i])) EXPECT_EQ(in.k[i], plain.k[i]) << i;
    }
    fa::attention::Inputs again = plain;  // the same seed, the same table; another, another
    fa::attention::page_inputs(p, again, 9);
    EXPECT_EQ(again.block_table, in.block_table);
  }
}

// The same on a cache of more than 2^20 (sequence, key) rows, where page_inputs splits its copies over the
// host's cores (harness/parallel.h): the pool and the read-back equal a serial gather through the same table.
TEST(AttentionInputs, PagedCacheOverManyCoresEqualsASerialGather) {
  const int B = 2, KVH = 2, Sk = (1 << 19) + 77, D = 8, page = 7;
  fa::AttnParams a = attn(B, 4, 1, Sk, D, false, DType::BF16);
  a.kv_heads = KVH, a.kv_cache = true;
  const std::vector<int> lens{Sk, Sk - 1000};
  const fa::AttnParams p = fa::attention::paged_params(a, lens, page);
  const fa::attention::Inputs plain = fa::attention::make_inputs(p, false, 11, lens);
  fa::attention::Inputs in = plain;
  fa::attention::page_inputs(p, in, 3);
  std::vector<float> pool(std::size_t(p.num_pages) * page * KVH * D, std::numeric_limits<float>::quiet_NaN());
  for (int b = 0; b < B; ++b)
    for (int j = 0; j < lens[b]; ++j)
      for (int h = 0; h < KVH; ++h)
        for (int d = 0; d < D; ++d) {
          const std::size_t pg = std::size_t(in.block_table[b * p.max_pages + j / page]);
          pool[((pg * page + j % page) * KVH + h) * D + d] = plain.k[((std::size_t(b) * KVH + h) * Sk + j) * D + d];
        }
  ASSERT_EQ(in.k_pages.size(), pool.size());
  std::size_t differ = 0, back = 0;
  for (std::size_t i = 0; i < pool.size(); ++i)
    differ += std::isnan(pool[i]) ? !std::isnan(in.k_pages[i]) : in.k_pages[i] != pool[i];
  for (std::size_t i = 0; i < plain.k.size(); ++i)
    back += std::isnan(plain.k[i]) ? !std::isnan(in.k[i]) : in.k[i] != plain.k[i];
  EXPECT_EQ(differ, 0u) << "elements of the K pool unlike a serial gather";
  EXPECT_EQ(back, 0u) << "elements of K read back through the table unlike the contiguous K";
}

// No lengths given means every sequence full, for the problem's own batch (a --sweep problem's, not the
// default problem's: the paged sweep once took 8 lengths into a batch of 1); given lengths stay as they are.
TEST(AttentionInputs, LengthsDefaultToFullForTheProblemsOwnBatch) {
  fa::AttnParams a;
  a.batch = 3, a.seq_k = 70;
  EXPECT_EQ(fa::attention::lens_or_full(a, {}), (std::vector<int>{70, 70, 70}));
  EXPECT_EQ(fa::attention::lens_or_full(a, {5, 0, 9}), (std::vector<int>{5, 0, 9}));
  a.batch = 1;
  EXPECT_EQ(fa::attention::lens_or_full(a, {}), (std::vector<int>{70}));
}

// A paged cache refuses, with the sequence and page named: a page size of 0, a table of the wrong size, a
// length that needs more pages than the table holds, a page index outside the pool (-1 or num_pages).
TEST(AttentionInputs, PagedCacheRefusesABadTable) {
  fa::AttnParams a = attn(2, 2, 1, 40, 8, false, DType::F16);
  a.kv_cache = true;
  const std::vector<int> lens{40, 17};
  const fa::AttnParams p = fa::attention::paged_params(a, lens, 16);  // 3 + 2 pages, max 3 per sequence
  const std::vector<int> good = fa::attention::make_block_table(p, lens, 1);
  EXPECT_NO_THROW(fa::attention::check_paging(p, lens, good));
  auto refusal = [&](const fa::AttnParams& q, const std::vector<int>& table) {
    try {
      fa::attention::check_paging(q, lens, table);
    } catch (const fa::UsageError& e) {
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  fa::AttnParams zero = p;
  zero.page_size = 0;
  EXPECT_NE(refusal(zero, good).find("page size must be at least 1"), std::string::npos);
  EXPECT_NE(refusal(p, {0, 1}).find("the block table has 2 entries"), std::string::npos);
  fa::AttnParams short_table = p;
  short_table.max_pages = 2;
  EXPECT_NE(refusal(short_table, {0, 1, 2, 3}).find("sequence 0's length 40 needs 3 pages of 16; its block table holds 2"),
            std::string::npos);
  std::vector<int> bad = good;
  bad[1] = -1;
  EXPECT_NE(refusal(p, bad).find("sequence 0's page 1 is page -1, outside the pool [0, " + std::to_string(p.num_pages)),
            std::string::npos);
  bad = good;
  bad[p.max_pages] = p.num_pages;
  EXPECT_NE(refusal(p, bad).find("sequence 1's page 0 is page " + std::to_string(p.num_pages)), std::string::npos);
}

TEST(AttentionReference, GroupedQueryAndKvCacheMatchGoldenData) {
  int n = 0;
  for (const char* op : {"attention_gqa", "attention_cache"})
    for (const golden::Case& c : golden::cases(FA_DATA_DIR, op)) {
      SCOPED_TRACE(c.name);
      const bool cache = c.op == "attention_cache";
      fa::AttnParams a = attn(int(c.integer("batch")), int(c.integer("heads")), int(c.integer("seq_q")),
                              int(c.integer("seq_k")), int(c.integer("head_dim")), c.integer("causal") != 0, DType::F32);
      a.kv_heads = int(c.integer("kv_heads")), a.scale = float(c.number("scale")), a.kv_cache = cache;
      auto floats = [&](const char* t) {
        const fa::NpyArray x = fa::read_npy(c.path(t));
        return std::vector<float>(x.data.begin(), x.data.end());
      };
      fa::attention::Inputs in{floats("q"), floats("k"), floats("v"), cache ? std::vector<float>{} : floats("dout")};
      if (cache) in.seq_lens = fa::attention::parse_seq_lens(c.param("lens"));
      ASSERT_EQ(in.k.size(), fa::attention::k_elems(a));
      std::vector<std::size_t> heads(std::size_t(a.batch) * a.heads);
      for (std::size_t h = 0; h < heads.size(); ++h) heads[h] = h;
      const fa::attention::HeadRef r = fa::attention::reference_heads(a, !cache, in, heads);
      EXPECT_TRUE(golden::matches_golden(r.o, c.path("o")));
      EXPECT_TRUE(golden::matches_golden(r.lse, c.path("lse")));
      if (!cache) {
        EXPECT_TRUE(golden::matches_golden(r.dq, c.path("dq")));
        EXPECT_TRUE(golden::matches_golden(r.dk, c.path("dk")));
        EXPECT_TRUE(golden::matches_golden(r.dv, c.path("dv")));
      }
      ++n;
    }
  EXPECT_GE(n, 6) << "grouped-query and KV cache golden cases in " << FA_DATA_DIR;
}

TEST(AttentionReference, SampleRowsKeepsTheEndsAndTheLargeRow) {
  const std::vector<std::size_t> s = fa::attention::sample_rows(1000, 40);
  ASSERT_EQ(s.size(), 40u);
  EXPECT_EQ(s[0], 0u);
  EXPECT_EQ(s[1], 1u);
  EXPECT_EQ(s.back(), 999u);
  EXPECT_TRUE(std::is_sorted(s.begin(), s.end()));
  EXPECT_EQ(std::set<std::size_t>(s.begin(), s.end()).size(), s.size());
  EXPECT_EQ(fa::attention::sample_rows(10, 6).size(), 10u);  // more than half: all
  EXPECT_EQ(fa::attention::spread_heads(8, 3), (std::vector<std::size_t>{0, 3, 7}));
  EXPECT_EQ(fa::attention::spread_heads(3, 5), (std::vector<std::size_t>{0, 1, 2}));
}

// The backward reference on sampled rows names rows over every head correctly: each sampled row
// equals that row of the whole head's backward (reference/ on the head alone), in fp64 and in
// low precision; key rows from several heads share no statistics.
TEST(AttentionReference, BackwardRowsAreTheRowsOfTheirHeads) {
  for (bool causal : {false, true}) {
    const fa::AttnParams a = attn(2, 2, 9, 13, 16, causal, DType::F16);
    const fa::attention::Inputs in = fa::attention::make_inputs(a, true, 7);
    const std::vector<std::size_t> q_rows{0, 1, 10, 20, 35}, k_rows{2, 14, 25, 51};  // heads 0..3
    const fa::attention::BwdRowRef r = fa::attention::reference_bwd_rows(a, in, q_rows, k_rows);
    const ref::AttnShape one{1, 1, a.seq_q, a.seq_k, a.head_dim, double(a.scale), a.causal};
    const std::size_t D = a.head_dim, qs = a.seq_q * D, ks = a.seq_k * D;
    for (ref::Rounding round : {ref::Rounding(nullptr), fa::rounding(a.dtype)}) {
      const auto& dq = round ? r.dq_lowp : r.dq;
      const auto& dk = round ? r.dk_lowp : r.dk;
      const auto& dv = round ? r.dv_lowp : r.dv;
      for (std::size_t t = 0; t < q_rows.size(); ++t) {
        const std::size_t h = q_rows[t] / a.seq_q;
        const int i = int(q_rows[t] % a.seq_q);
        std::vector<double> want(D);
        ref::attention_backward_dq_rows(one, &in.q[h * qs], &in.k[h * ks], &in.v[h * ks], &in.dout[h * qs], &i, 1,
                                        round, want.data());
        EXPECT_TRUE(std::equal(want.begin(), want.end(), dq.begin() + t * D)) << "dQ row " << q_rows[t];
      }
      for (std::size_t t = 0; t < k_rows.size(); ++t) {
        const std::size_t h = k_rows[t] / a.seq_k;
        std::vector<int> all(a.seq_q), j{int(k_rows[t] % a.seq_k)};
        for (int i = 0; i < a.seq_q; ++i) all[i] = i;
        std::vector<double> lse(a.seq_q), delta(a.seq_q), wk(D), wv(D);
        const float *q = &in.q[h * qs], *k = &in.k[h * ks], *v = &in.v[h * ks], *dout = &in.dout[h * qs];
        ref::attention_backward_stats(one, q, k, v, dout, all.data(), a.seq_q, round, lse.data(), delta.data());
        ref::attention_backward_dkdv_rows(one, q, k, v, dout, lse.data(), delta.data(), j.data(), 1, round, wk.data(),
                                          wv.data());
        EXPECT_TRUE(std::equal(wk.begin(), wk.end(), dk.begin() + t * D)) << "dK row " << k_rows[t];
        EXPECT_TRUE(std::equal(wv.begin(), wv.end(), dv.begin() + t * D)) << "dV row " << k_rows[t];
      }
    }
  }
}

// ref_given (fp64 with delta from the given O): with the fp64 O itself given (as floats), it is the
// fp64 gradient up to that float rounding; with one row of O moved, dQ changes in that row alone
// and dK in the key rows that row sees; without a given O there is none.
std::vector<std::size_t> all_rows(std::size_t n) {
  std::vector<std::size_t> r(n);
  for (std::size_t i = 0; i < n; ++i) r[i] = i;
  return r;
}
double max_abs(const std::vector<double>& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::fabs(x));
  return m;
}

TEST(AttentionReference, GivenOMovesTheGradientsOnlyThroughDelta) {
  for (bool causal : {false, true}) {
    fa::AttnParams a = attn(1, 2, 12, 10, 16, causal, DType::F16);
    fa::attention::Inputs in = fa::attention::make_inputs(a, true, 11);
    const std::vector<std::size_t> q_rows = all_rows(fa::attention::rows(a)), k_rows = all_rows(2 * a.seq_k);
    EXPECT_TRUE(fa::attention::reference_bwd_rows(a, in, q_rows, k_rows).dq_given.empty());
    const fa::attention::RowRef fwd = fa::attention::reference_rows(a, in, q_rows);
    in.o.assign(fwd.o.begin(), fwd.o.end());
    const fa::attention::BwdRowRef same = fa::attention::reference_bwd_rows(a, in, q_rows, k_rows);
    ASSERT_EQ(same.dq_given.size(), same.dq.size());
    ASSERT_EQ(same.dk_given.size(), same.dk.size());
    const double dq_mag = max_abs(same.dq), dk_mag = max_abs(same.dk);  // O's float rounding: ~1e-6 of these
    for (std::size_t i = 0; i < same.dq.size(); ++i) ASSERT_NEAR(same.dq_given[i], same.dq[i], 1e-5 * dq_mag) << i;
    for (std::size_t i = 0; i < same.dk.size(); ++i) ASSERT_NEAR(same.dk_given[i], same.dk[i], 1e-5 * dk_mag) << i;
    const int moved = 5, D = a.head_dim;  // query row 5 of head 0: its O off by 1e-2
    for (int d = 0; d < D; ++d) in.o[moved * D + d] += 1e-2f;
    const fa::attention::BwdRowRef r = fa::attention::reference_bwd_rows(a, in, q_rows, k_rows);
    auto row_diff = [&](const std::vector<double>& x, const std::vector<double>& y, std::size_t row) {
      double diff = 0;
      for (int d = 0; d < D; ++d) diff = std::max(diff, std::fabs(x[row * D + d] - y[row * D + d]));
      return diff;
    };
    for (std::size_t row = 0; row < q_rows.size(); ++row) {
      if (row == std::size_t(moved))
        EXPECT_GT(row_diff(r.dq_given, r.dq, row), 1e-3 * dq_mag) << "dQ row " << row;
      else
        EXPECT_LE(row_diff(r.dq_given, r.dq, row), 1e-5 * dq_mag) << "dQ row " << row;
    }
    int changed = 0;
    for (std::size_t key = 0; key < k_rows.size(); ++key) {
      if (row_diff(r.dk_given, r.dk, key) <= 1e-5 * dk_mag) continue;
      ++changed;
      EXPECT_TRUE(key < std::size_t(a.seq_k) && (!causal || int(key) <= moved)) << "dK row " << key << " moved";
    }
    EXPECT_GT(changed, 0);
  }
}

// A second O (reference_bwd_rows's prev_o, a previous step's): dq_prev and dk_prev are, bit for bit, the
// dq_given and dk_given of a call with that O given, on a grouped problem (dK sums a group); every other
// output is what the call without it gives; a second O of another size is refused.
TEST(AttentionReference, SecondOMatchesThatOGiven) {
  fa::AttnParams a = attn(1, 4, 12, 10, 16, true, DType::BF16);
  a.kv_heads = 2;
  fa::attention::Inputs in = fa::attention::make_inputs(a, true, 13);
  const std::vector<std::size_t> q_rows{0, 1, 17, 47}, k_rows{0, 9, 13, 19};
  const fa::attention::RowRef fwd = fa::attention::reference_rows(a, in, all_rows(fa::attention::rows(a)));
  for (std::size_t e = 0; e < fwd.o.size(); ++e) in.o.push_back(fa::round_to(DType::BF16, float(fwd.o[e])));
  std::vector<float> prev = in.o;  // another O: the same rounded to fewer bits
  for (float& x : prev) x = fa::round_to(DType::F16, x * 1.001f);
  const fa::attention::BwdRowRef with = fa::attention::reference_bwd_rows(a, in, q_rows, k_rows, &prev),
                                 without = fa::attention::reference_bwd_rows(a, in, q_rows, k_rows);
  fa::attention::Inputs in_prev = in;
  in_prev.o = prev;
  const fa::attention::BwdRowRef given_prev = fa::attention::reference_bwd_rows(a, in_prev, q_rows, k_rows);
  ASSERT_EQ(with.dq_prev.size(), q_rows.size() * a.head_dim);
  ASSERT_EQ(with.dk_prev.size(), k_rows.size() * a.head_dim);
  EXPECT_EQ(with.dq_prev, given_prev.dq_given);
  EXPECT_EQ(with.dk_prev, given_prev.dk_given);
  EXPECT_NE(with.dq_prev, with.dq_given);  // the second O moved something
  for (auto [x, y] : {std::pair{&with.dq, &without.dq}, std::pair{&with.dq_lowp, &without.dq_lowp},
                      std::pair{&with.dk, &without.dk}, std::pair{&with.dk_lowp, &without.dk_lowp},
                      std::pair{&with.dv, &without.dv}, std::pair{&with.dv_lowp, &without.dv_lowp},
                      std::pair{&with.dq_given, &without.dq_given}, std::pair{&with.dk_given, &without.dk_given}})
    EXPECT_EQ(*x, *y);
  EXPECT_TRUE(without.dq_prev.empty() && without.dk_prev.empty());
  prev.pop_back();
  EXPECT_THROW(fa::attention::reference_bwd_rows(a, in, q_rows, k_rows, &prev), fa::UsageError);
}

// ---- CLI ------------------------------------------------------------------------------------
struct Cli {
  long long rows = 7;
  double scale = 0.5;
  bool check = false;
  std::string dtype = "f16";
  fa::ArgParser p{"prog", "test program"};
  Cli() {
    p.add_int("--rows", &rows, 1, 100, "rows");
    p.add_double("--scale", &scale, 0.0, 10.0, "scale");
    p.add_flag("--check", &check, "check");
    p.add_string("--dtype", &dtype, "element type", {"f16", "bf16"});
  }
  bool parse(std::vector<const char*> args) {
    args.insert(args.begin(), "prog");
    return p.parse(int(args.size()), args.data());
  }
};

TEST(Cli, ParsesBothValueForms) {
  Cli c;
  EXPECT_TRUE(c.parse({"--rows", "12", "--scale=2.5", "--check", "--dtype=bf16"}));
  EXPECT_EQ(c.rows, 12);
  EXPECT_DOUBLE_EQ(c.scale, 2.5);
  EXPECT_TRUE(c.check);
  EXPECT_EQ(c.dtype, "bf16");
  EXPECT_TRUE(c.p.given("--rows"));
}

TEST(Cli, DefaultsStayWhenNotGiven) {
  Cli c;
  EXPECT_TRUE(c.parse({}));
  EXPECT_EQ(c.rows, 7);
  EXPECT_FALSE(c.p.given("--rows"));
}

void expect_usage_error(std::vector<const char*> args, const std::string& fragment) {
  Cli c;
  try {
    c.parse(args);
    ADD_FAILURE() << "no error for: " << fragment;
  } catch (const fa::UsageError& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

TEST(Cli, BadInputGivesClearErrors) {
  expect_usage_error({"--nope"}, "unknown flag '--nope'");
  expect_usage_error({"--rows"}, "--rows needs a value");
  expect_usage_error({"--rows", "0"}, "--rows: 0 is out of range [1, 100]");
  expect_usage_error({"--rows", "101"}, "out of range");
  expect_usage_error({"--rows", "-3"}, "out of range");
  expect_usage_error({"--rows", "1e3"}, "'1e3' is not an integer");
  expect_usage_error({"--rows", "99999999999999999999"}, "--rows: 99999999999999999999 is out of range");
  expect_usage_error({"--rows="}, "--rows needs a value");
  expect_usage_error({"--scale", "nan"}, "not a finite number");
  expect_usage_error({"--scale", "11"}, "out of range");
  expect_usage_error({"--check=1"}, "--check takes no value");
  expect_usage_error({"--dtype", "f64"}, "'f64' is not one of: f16, bf16");
  expect_usage_error({"rows"}, "unexpected argument 'rows'");
}

TEST(Cli, HelpListsEveryFlagAndStops) {
  Cli c;
  testing::internal::CaptureStdout();
  EXPECT_FALSE(c.parse({"--help"}));
  const std::string out = testing::internal::GetCapturedStdout();
  for (const char* f : {"--rows", "--scale", "--check", "--dtype", "usage: prog"})
    EXPECT_NE(out.find(f), std::string::npos) << f;
}

// ---- random ---------------------------------------------------------------------------------
TEST(Random, SeededFillIsReproducibleAndInRange) {
  std::vector<float> a(3 << 20), b(3 << 20), c(3 << 20);  // large enough for the threaded path
  fa::fill_uniform(a, 42, -2.0f, 3.0f);
  fa::fill_uniform(b, 42, -2.0f, 3.0f);
  fa::fill_uniform(c, 43, -2.0f, 3.0f);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  double mean = 0;
  for (float v : a) {
    ASSERT_GE(v, -2.0f);
    ASSERT_LT(v, 3.0f);
    mean += v;
  }
  EXPECT_NEAR(mean / a.size(), 0.5, 0.01);  // uniform on [-2, 3)
}

// fill_normal: over 3·2^20 draws (the threaded path) the mean is within 0.005 of 0 and the standard
// deviation within 0.005 of 1 (the sampling errors are ~0.0006 and ~0.0004: ~8 and ~12 sigma of
// margin), 68.27% of draws within one sd and 95.45% within two (to 0.3 points: ~10 sigma), both
// signs and |x| > 4 occur; the two elements of a pair (drawn together) and neighbouring pairs are
// uncorrelated (to 0.005: ~6 sigma); the same seed gives the same draws, another seed others, and element i
// depends on (seed, i) alone (a short fill, one thread, and a threaded fill of odd length, are each the
// prefix of the long one).
TEST(Random, NormalFillIsStandardNormalAndReproducible) {
  std::vector<float> a(3 << 20), b(3 << 20), c(3 << 20), head(1001);
  fa::fill_normal(a, 42);
  fa::fill_normal(b, 42);
  fa::fill_normal(c, 43);
  fa::fill_normal(head, 42);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  EXPECT_TRUE(std::equal(head.begin(), head.end(), a.begin()));
  // A threaded fill of odd length (2^20 + 3 over two or more cores, its last pair cut): still the prefix.
  std::vector<float> odd((1 << 20) + 3);
  fa::fill_normal(odd, 42);
  EXPECT_TRUE(std::equal(odd.begin(), odd.end(), a.begin()));
  double sum = 0, sum2 = 0;
  std::size_t within1 = 0, within2 = 0, beyond4 = 0, negative = 0;
  for (float v : a) {
    ASSERT_TRUE(std::isfinite(v));
    sum += v, sum2 += double(v) * v;
    within1 += std::fabs(v) < 1 ? 1 : 0, within2 += std::fabs(v) < 2 ? 1 : 0;
    beyond4 += std::fabs(v) > 4 ? 1 : 0, negative += v < 0 ? 1 : 0;
  }
  const double n = double(a.size()), mean = sum / n, sd = std::sqrt(sum2 / n - mean * mean);
  EXPECT_NEAR(mean, 0.0, 0.005);
  EXPECT_NEAR(sd, 1.0, 0.005);
  EXPECT_NEAR(within1 / n, 0.6827, 0.003);
  EXPECT_NEAR(within2 / n, 0.9545, 0.003);
  EXPECT_NEAR(negative / n, 0.5, 0.003);
  EXPECT_GT(beyond4, 0u);  // ~200 expected: a tail, not a clipped range
  double within_pair = 0, across_pairs = 0;
  for (std::size_t i = 0; i + 3 < a.size(); i += 2)
    within_pair += double(a[i]) * a[i + 1], across_pairs += double(a[i + 1]) * a[i + 2];
  EXPECT_NEAR(within_pair / (n / 2), 0.0, 0.005);
  EXPECT_NEAR(across_pairs / (n / 2), 0.0, 0.005);
  std::vector<float> scaled(1001);
  fa::fill_normal(scaled, 42, 3.f, 2.f);  // mean + sd · the same standard draws
  for (std::size_t i = 0; i < scaled.size(); ++i) ASSERT_NEAR(scaled[i], 3.f + 2.f * head[i], 1e-5f) << i;
}

TEST(Random, FreshSeedsDiffer) { EXPECT_NE(fa::fresh_seed(), fa::fresh_seed()); }

}  // namespace
