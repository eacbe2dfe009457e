// test_reference.cpp: the fp64 CPU references (reference/) against NumPy golden data
// (tests/data/, written by reference/make_reference.py), plus properties that need no
// golden data: softmax sums to 1, the -inf/NaN conventions, NT == NN, the LSE definition, and
// the attention backward against finite differences of the forward; the low-precision
// references of the forward and the backward (ref_lowp of the fp16/bf16 tolerance) against the
// fp64 ones, and the per-row rule on the backward. CPU only.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <ostream>
#include <random>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "golden.h"
#include "lowp.h"
#include "npy.h"
#include "reference.h"
#include "tolerance.h"

#ifndef FA_DATA_DIR
#error "compile with -DFA_DATA_DIR=\"<path of tests/data>\""
#endif

// How GoogleTest shows an AttnShape (found by argument-dependent lookup, hence namespace ref).
namespace ref {
void PrintTo(const AttnShape& s, std::ostream* os) {
  *os << "B" << s.batch << " H" << s.heads << " Sq" << s.seq_q << " Sk" << s.seq_k << " D" << s.head_dim << " scale "
      << s.scale << (s.causal ? " causal" : "");
}
}  // namespace ref

// How GoogleTest shows a golden case (instead of a byte dump): its manifest line.
namespace golden {
void PrintTo(const Case& c, std::ostream* os) {
  *os << c.op << " " << c.name;
  for (const auto& [key, value] : c.params) *os << " " << key << "=" << value;
}
}  // namespace golden

namespace {

using Vec = std::vector<double>;
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// ---- golden data --------------------------------------------------------------------------------

// Every case of tests/data/manifest.txt; empty if it cannot be read (the Manifest test says why).
std::vector<golden::Case> all_cases() {
  try {
    return golden::cases(FA_DATA_DIR);
  } catch (const std::exception&) {
    return {};
  }
}

// The tensors each op's case stores: inputs first, then outputs.
const std::map<std::string, std::vector<std::string>> kTensors = {
    {"softmax", {"x", "y"}},
    {"matmul", {"a", "b", "c"}},
    {"attention", {"q", "k", "v", "dout", "o", "lse", "dq", "dk", "dv"}},
    // grouped-query attention and a KV cache: the harness's references, checked by tests/test_harness.cpp
    {"attention_gqa", {"q", "k", "v", "dout", "o", "lse", "dq", "dk", "dv"}},
    {"attention_cache", {"q", "k", "v", "o", "lse"}},
};
using golden::matches_golden;

// Reads an input tensor and checks it has the element count the manifest's shape implies.
Vec input(const golden::Case& c, const std::string& tensor, long long expected_size) {
  fa::NpyArray a = fa::read_npy(c.path(tensor));
  EXPECT_EQ(a.dtype, "<f4") << c.path(tensor) << ": inputs are stored as float32";
  if ((long long)a.size() != expected_size)
    throw std::runtime_error(c.path(tensor) + ": " + std::to_string(a.size()) + " elements, manifest implies " +
                             std::to_string(expected_size));
  return a.data;
}

void run_softmax(const golden::Case& c) {
  const long long rows = c.integer("rows"), cols = c.integer("cols");
  const Vec x = input(c, "x", rows * cols);
  Vec y(x.size());
  ref::softmax(x.data(), y.data(), rows, cols);
  EXPECT_TRUE(matches_golden(y, c.path("y")));
}

void run_matmul(const golden::Case& c) {
  const int M = static_cast<int>(c.integer("M")), N = static_cast<int>(c.integer("N")),
            K = static_cast<int>(c.integer("K"));
  const Vec a = input(c, "a", (long long)M * K), b = input(c, "b", (long long)K * N);
  Vec out(size_t(M) * N);
  ref::matmul(a.data(), b.data(), out.data(), M, N, K, c.number("alpha"), c.param("layout") == "nt");
  EXPECT_TRUE(matches_golden(out, c.path("c")));
}

void run_attention(const golden::Case& c) {
  auto get = [&](const char* key) { return static_cast<int>(c.integer(key)); };
  const ref::AttnShape s{get("batch"),    get("heads"),      get("seq_q"),      get("seq_k"),
                         get("head_dim"), c.number("scale"), get("causal") != 0};
  const long long bh = (long long)s.batch * s.heads, nq = bh * s.seq_q * s.head_dim, nk = bh * s.seq_k * s.head_dim;
  const Vec q = input(c, "q", nq), k = input(c, "k", nk), v = input(c, "v", nk), dout = input(c, "dout", nq);
  Vec o(nq), lse(bh * s.seq_q), dq(nq), dk(nk), dv(nk);
  ref::attention_forward(s, q.data(), k.data(), v.data(), o.data(), lse.data());
  ref::attention_backward(s, q.data(), k.data(), v.data(), dout.data(), dq.data(), dk.data(), dv.data());
  EXPECT_TRUE(matches_golden(o, c.path("o")));
  EXPECT_TRUE(matches_golden(lse, c.path("lse")));
  EXPECT_TRUE(matches_golden(dq, c.path("dq")));
  EXPECT_TRUE(matches_golden(dk, c.path("dk")));
  EXPECT_TRUE(matches_golden(dv, c.path("dv")));
}

TEST(Manifest, NonEmptyAndEveryFileExists) {
  const auto cases = golden::cases(FA_DATA_DIR);  // throws (a test failure) if it cannot be read
  ASSERT_FALSE(cases.empty()) << "no cases in " << FA_DATA_DIR << "/manifest.txt; generate them with "
                              << "reference/make_reference.py";
  for (const golden::Case& c : cases) {
    ASSERT_TRUE(kTensors.count(c.op)) << "unknown op '" << c.op << "' for case " << c.name;
    for (const std::string& t : kTensors.at(c.op))
      EXPECT_TRUE(std::ifstream(c.path(t)).good()) << "missing " << c.path(t);
  }
}

class Golden : public ::testing::TestWithParam<golden::Case> {};

TEST_P(Golden, ReferenceMatchesNumpy) {
  const golden::Case& c = GetParam();
  if (c.op == "softmax")
    run_softmax(c);
  else if (c.op == "matmul")
    run_matmul(c);
  else if (c.op == "attention")
    run_attention(c);
  else
    FAIL() << "unknown op '" << c.op << "'";
}

// The cases of reference/'s own ops (grouped-query attention and the KV cache are the harness's).
std::vector<golden::Case> reference_cases() {
  std::vector<golden::Case> out;
  for (golden::Case& c : all_cases())
    if (c.op == "softmax" || c.op == "matmul" || c.op == "attention") out.push_back(std::move(c));
  return out;
}

INSTANTIATE_TEST_SUITE_P(Data, Golden, ::testing::ValuesIn(reference_cases()),
                         [](const ::testing::TestParamInfo<golden::Case>& info) { return info.param.name; });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(Golden);  // an empty manifest fails in Manifest.*

// ---- properties, on fresh random inputs ---------------------------------------------------------

Vec random_vec(size_t n, unsigned seed, double offset = 0.0, double sigma = 1.0) {
  std::mt19937_64 gen(seed);
  std::normal_distribution<double> dist(offset, sigma);
  Vec x(n);
  for (double& e : x) e = dist(gen);
  return x;
}

TEST(SoftmaxProperties, RowsSumToOneEvenForHugeMagnitudes) {
  const long long rows = 4, cols = 257;
  Vec x = random_vec(rows * cols, 1, 0.0, 5.0);
  for (long long j = 0; j < cols; ++j) {
    x[1 * cols + j] *= 1e29;                   // exp(x) would overflow without the max subtracted
    x[2 * cols + j] = (j % 2 ? 3e38 : -3e38);  // near the float range
    x[3 * cols + j] = 1e30;                    // constant row: uniform
  }
  Vec y(x.size());
  ref::softmax(x.data(), y.data(), rows, cols);
  for (long long r = 0; r < rows; ++r) {
    double sum = 0.0;
    for (long long j = 0; j < cols; ++j) {
      ASSERT_TRUE(y[r * cols + j] >= 0.0 && y[r * cols + j] <= 1.0) << "row " << r << " col " << j;
      sum += y[r * cols + j];
    }
    EXPECT_NEAR(sum, 1.0, 1e-13) << "row " << r;
  }
  EXPECT_NEAR(y[3 * cols + 5], 1.0 / cols, 1e-15);
}

TEST(SoftmaxProperties, NegInfEntriesGiveZeroAndAllNegInfRowGivesZeros) {
  const Vec x = {-kInf, 1.0,   2.0,   -kInf,  //
                 -kInf, -kInf, -kInf, -kInf};
  Vec y(x.size(), kNaN);
  ref::softmax(x.data(), y.data(), 2, 4);
  EXPECT_EQ(y[0], 0.0);
  EXPECT_EQ(y[3], 0.0);
  EXPECT_NEAR(y[1], 1.0 / (1.0 + std::exp(1.0)), 1e-15);
  for (int j = 4; j < 8; ++j) EXPECT_EQ(y[j], 0.0) << "an all -inf row attends to nothing: zeros, not NaN";
}

TEST(SoftmaxProperties, NanOrPosInfMakesTheWholeRowNan) {
  const Vec x = {1.0, kNaN, 2.0,  //
                 1.0, kInf, 2.0,  //
                 1.0, 0.0,  2.0};
  Vec y(x.size());
  ref::softmax(x.data(), y.data(), 3, 3);
  for (int j = 0; j < 6; ++j) EXPECT_TRUE(std::isnan(y[j])) << "element " << j;
  for (int j = 6; j < 9; ++j) EXPECT_TRUE(std::isfinite(y[j])) << "other rows are unaffected";
}

TEST(MatmulProperties, NtEqualsNnWithBTransposed) {
  const int M = 13, N = 29, K = 37;
  const Vec a = random_vec(size_t(M) * K, 2), b_nk = random_vec(size_t(N) * K, 3);
  Vec b_kn(size_t(K) * N);
  for (int n = 0; n < N; ++n)
    for (int k = 0; k < K; ++k) b_kn[size_t(k) * N + n] = b_nk[size_t(n) * K + k];
  Vec c_nt(size_t(M) * N), c_nn(size_t(M) * N);
  ref::matmul(a.data(), b_nk.data(), c_nt.data(), M, N, K, 0.75, true);
  ref::matmul(a.data(), b_kn.data(), c_nn.data(), M, N, K, 0.75, false);
  for (size_t i = 0; i < c_nt.size(); ++i) EXPECT_NEAR(c_nt[i], c_nn[i], 1e-13) << "element " << i;
  // And one element by its definition.
  double c01 = 0.0;
  for (int k = 0; k < K; ++k) c01 += a[k] * b_nk[size_t(1) * K + k];
  EXPECT_NEAR(c_nt[1], 0.75 * c01, 1e-13);
}

// Random attention inputs (+0.5 offset as the GPU tests use) for a shape.
struct AttnInputs {
  Vec q, k, v, dout;
  AttnInputs(const ref::AttnShape& s, unsigned seed) {
    const size_t bh = size_t(s.batch) * s.heads, nq = bh * s.seq_q * s.head_dim, nk = bh * s.seq_k * s.head_dim;
    q = random_vec(nq, seed, 0.5);
    k = random_vec(nk, seed + 1, 0.5);
    v = random_vec(nk, seed + 2, 0.5);
    dout = random_vec(nq, seed + 3);
  }
};

class AttentionProperties : public ::testing::TestWithParam<ref::AttnShape> {};

TEST_P(AttentionProperties, LseIsLogSumExpOfVisibleScores) {
  const ref::AttnShape s = GetParam();
  const AttnInputs in(s, 10);
  const size_t bh = size_t(s.batch) * s.heads, D = s.head_dim;
  Vec o(in.q.size()), lse(bh * s.seq_q);
  ref::attention_forward(s, in.q.data(), in.k.data(), in.v.data(), o.data(), lse.data());
  for (size_t h = 0; h < bh; ++h)
    for (int i = 0; i < s.seq_q; ++i) {
      double sum = 0.0;  // inputs are small, so the unshifted exp is safe here
      for (int j = 0; j < s.seq_k && !(s.causal && j > i); ++j) {
        double dot = 0.0;
        for (size_t d = 0; d < D; ++d) dot += in.q[(h * s.seq_q + i) * D + d] * in.k[(h * s.seq_k + j) * D + d];
        sum += std::exp(s.scale * dot);
      }
      EXPECT_NEAR(lse[h * s.seq_q + i], std::log(sum), 1e-12) << "head " << h << " row " << i;
    }
}

// The backward against a central finite difference of L(q, k, v) = sum(O ∘ dO), whose gradient
// is exactly (dq, dk, dv) for upstream gradient dO. This checks the formulas, independently of NumPy.
TEST_P(AttentionProperties, BackwardMatchesFiniteDifferences) {
  const ref::AttnShape s = GetParam();
  AttnInputs in(s, 20);
  Vec o(in.q.size()), lse(in.q.size() / s.head_dim);
  auto loss = [&] {
    ref::attention_forward(s, in.q.data(), in.k.data(), in.v.data(), o.data(), lse.data());
    double l = 0.0;
    for (size_t i = 0; i < o.size(); ++i) l += o[i] * in.dout[i];
    return l;
  };
  Vec dq(in.q.size()), dk(in.k.size()), dv(in.v.size());
  ref::attention_backward(s, in.q.data(), in.k.data(), in.v.data(), in.dout.data(), dq.data(), dk.data(), dv.data());

  // Error of the central difference: O(h²) truncation + O(eps/h) rounding, ~1e-10 for h = 1e-5.
  const double h = 1e-5, tol = 1e-7;
  const std::pair<Vec*, const Vec*> params[] = {{&in.q, &dq}, {&in.k, &dk}, {&in.v, &dv}};
  const char* names[] = {"dq", "dk", "dv"};
  for (int p = 0; p < 3; ++p) {
    Vec& x = *params[p].first;
    const Vec& grad = *params[p].second;
    for (size_t i = 0; i < x.size(); ++i) {
      const double saved = x[i];
      x[i] = saved + h;
      const double up = loss();
      x[i] = saved - h;
      const double down = loss();
      x[i] = saved;
      EXPECT_NEAR(grad[i], (up - down) / (2 * h), tol * (1.0 + std::abs(grad[i]))) << names[p] << "[" << i << "]";
    }
  }
}

// {batch, heads, seq_q, seq_k, head_dim, scale, causal}: tiny, odd, seq_q != seq_k both ways.
INSTANTIATE_TEST_SUITE_P(Tiny, AttentionProperties,
                         ::testing::Values(ref::AttnShape{1, 1, 4, 6, 3, 0.7, false},
                                           ref::AttnShape{1, 2, 5, 3, 4, 0.5, true},
                                           ref::AttnShape{2, 1, 3, 7, 5, 0.45, true}),
                         [](const ::testing::TestParamInfo<ref::AttnShape>& info) {
                           const ref::AttnShape& s = info.param;
                           return "b" + std::to_string(s.batch) + "h" + std::to_string(s.heads) + "_q" +
                                  std::to_string(s.seq_q) + "_k" + std::to_string(s.seq_k) + "_d" +
                                  std::to_string(s.head_dim) + (s.causal ? "_causal" : "");
                         });

TEST(AttentionProperties, QueryWithNoKeysAttendsToNothing) {
  // seq_k = 0: every row is fully masked. O = 0, LSE = -inf, dQ = 0, and no NaN anywhere.
  const ref::AttnShape s{1, 1, 3, 0, 4, 0.5, false};
  const Vec q = random_vec(12, 30), dout = random_vec(12, 31);
  Vec o(12, kNaN), lse(3, kNaN), dq(12, kNaN);
  ref::attention_forward(s, q.data(), nullptr, nullptr, o.data(), lse.data());
  ref::attention_backward(s, q.data(), nullptr, nullptr, dout.data(), dq.data(), nullptr, nullptr);
  for (double e : o) EXPECT_EQ(e, 0.0);
  for (double e : lse) EXPECT_EQ(e, -kInf);
  for (double e : dq) EXPECT_EQ(e, 0.0);
}

// ---- the low-precision reference (attention_forward_rows with a rounding) ----------------------

// Inputs of a 16-bit step: the +0.5-offset inputs rounded to the type, as float.
std::vector<float> lowp_vec(size_t n, unsigned seed, double offset, fa::DType t) {
  const Vec x = random_vec(n, seed, offset);
  std::vector<float> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = fa::round_to(t, float(x[i]));
  return out;
}

struct LowpCase {
  ref::AttnShape s;  // one head
  fa::DType t;
};
void PrintTo(const LowpCase& c, std::ostream* os) {
  ref::PrintTo(c.s, os);
  *os << " " << fa::dtype_name(c.t);
}

class LowpReference : public ::testing::TestWithParam<LowpCase> {};

// Every row of one head through attention_forward_rows, fp64 (round = null) and low precision.
struct LowpRows {
  Vec o, lse, o_lowp, lse_lowp;
  std::vector<float> q, k, v;
  LowpRows(const LowpCase& c, unsigned seed) {
    const ref::AttnShape& s = c.s;
    q = lowp_vec(size_t(s.seq_q) * s.head_dim, seed, 0.5, c.t);
    k = lowp_vec(size_t(s.seq_k) * s.head_dim, seed + 1, 0.5, c.t);
    v = lowp_vec(size_t(s.seq_k) * s.head_dim, seed + 2, 0.5, c.t);
    std::vector<int> rows(s.seq_q);
    for (int i = 0; i < s.seq_q; ++i) rows[i] = i;
    o.resize(q.size()), o_lowp.resize(q.size()), lse.resize(s.seq_q), lse_lowp.resize(s.seq_q);
    ref::attention_forward_rows(s, q.data(), k.data(), v.data(), rows.data(), s.seq_q, nullptr, o.data(), lse.data());
    ref::attention_forward_rows(s, q.data(), k.data(), v.data(), rows.data(), s.seq_q, fa::rounding(c.t), o_lowp.data(),
                                lse_lowp.data());
  }
};

// Without rounding, the rows are attention_forward's rows, bit for bit (also for a subset of rows
// in any order).
TEST_P(LowpReference, Fp64RowsAreAttentionForward) {
  const LowpCase c = GetParam();
  const LowpRows r(c, 40);
  const Vec q(r.q.begin(), r.q.end()), k(r.k.begin(), r.k.end()), v(r.v.begin(), r.v.end());
  Vec o(q.size()), lse(c.s.seq_q);
  ref::attention_forward(c.s, q.data(), k.data(), v.data(), o.data(), lse.data());
  EXPECT_EQ(r.o, o);
  EXPECT_EQ(r.lse, lse);
  const int rows[] = {c.s.seq_q - 1, 0};
  Vec o2(2 * size_t(c.s.head_dim)), lse2(2);
  ref::attention_forward_rows(c.s, r.q.data(), r.k.data(), r.v.data(), rows, 2, nullptr, o2.data(), lse2.data());
  EXPECT_EQ(lse2[0], lse[c.s.seq_q - 1]);
  EXPECT_EQ(lse2[1], lse[0]);
  EXPECT_TRUE(std::equal(o2.begin() + c.s.head_dim, o2.end(), o.begin()));
}

// Both roundings of a row at once (one row of scores for both, as the harness asks for them) give
// what one call each gives, bit for bit.
TEST_P(LowpReference, BothRoundingsAtOnceAreEachAlone) {
  const LowpCase c = GetParam();
  const LowpRows r(c, 45);
  const int D = c.s.head_dim;
  const ref::Rounding rounds[2] = {nullptr, fa::rounding(c.t)};
  for (int i = 0; i < c.s.seq_q; ++i) {
    Vec o(2 * size_t(D)), lse(2);
    double* out[2] = {o.data(), o.data() + D};
    ref::attention_forward_row(c.s, r.q.data(), r.k.data(), r.v.data(), i, rounds, 2, out, lse.data());
    EXPECT_EQ(lse[0], r.lse[i]);
    EXPECT_EQ(lse[1], r.lse_lowp[i]);
    EXPECT_TRUE(std::equal(o.begin(), o.begin() + D, r.o.begin() + size_t(i) * D)) << "fp64 row " << i;
    EXPECT_TRUE(std::equal(o.begin() + D, o.end(), r.o_lowp.begin() + size_t(i) * D)) << "low-precision row " << i;
  }
}

// The low-precision rows: every O a value of the type, and within the first-order error of the
// three roundings, per row, with u the unit roundoff (2^-11 f16, 2^-8 bf16):
//   S_ij rounded (|dS| <= u·max|S_i|)  moves P_ij by a factor within exp(±2u·max|S_i|) = 1 ± E,
//   P_ij rounded: another factor 1 ± u, so |sum_j P'_ij v_j - O_i| <= max|v|·((1+E)(1+u) - 1),
//   O rounded: + u·|O'|;  and |LSE_lowp - LSE| <= u·max|S_i| (a log-sum-exp moves by at most
//   the largest move of its arguments). The error is not zero either: the rounding happened.
TEST_P(LowpReference, ErrorIsThatOfTheRoundings) {
  const LowpCase c = GetParam();
  const ref::AttnShape& s = c.s;
  const LowpRows r(c, 50);
  const double u = fa::ulp(c.t, 1.0) / 2;
  const size_t D = s.head_dim;
  double vmax = 0, max_err = 0, max_lse_err = 0;
  for (float x : r.v) vmax = std::max(vmax, std::abs(double(x)));
  for (int i = 0; i < s.seq_q; ++i) {
    double smax = 0;
    for (int j = 0; j < s.seq_k && !(s.causal && j > i); ++j) {
      double dot = 0;
      for (size_t d = 0; d < D; ++d) dot += double(r.q[i * D + d]) * double(r.k[j * D + d]);
      smax = std::max(smax, std::abs(s.scale * dot));
    }
    const double E = std::expm1(2 * u * smax), mix = vmax * ((1 + E) * (1 + u) - 1);
    for (size_t d = 0; d < D; ++d) {
      const double lo = r.o_lowp[i * D + d], hi = r.o[i * D + d];
      ASSERT_EQ(fa::round_to(c.t, lo), lo)
          << "O[" << i << ", " << d << "] is not a " << fa::dtype_name(c.t) << " value";
      EXPECT_LE(std::abs(lo - hi), mix + u * (std::abs(hi) + mix)) << "O[" << i << ", " << d << "]";
      max_err = std::max(max_err, std::abs(lo - hi));
    }
    EXPECT_LE(std::abs(r.lse_lowp[i] - r.lse[i]), u * smax * (1 + 1e-9)) << "LSE[" << i << "]";
    max_lse_err = std::max(max_lse_err, std::abs(r.lse_lowp[i] - r.lse[i]));
  }
  EXPECT_GT(max_lse_err, 0.0) << "LSE_lowp == LSE everywhere: are the scores rounded?";
  EXPECT_GT(max_err, 0.0) << "no rounding happened";
  EXPECT_GT(max_err, fa::ulp(c.t, 0.25) / 4) << "errors far below an ulp of |O| ~ 0.5: is O rounded?";
}

// One visible key (seq_k = 1, or causal row 0): P = 1 exactly and O = V exactly, in both.
TEST_P(LowpReference, ExactWithOneVisibleKey) {
  LowpCase c = GetParam();
  c.s.seq_k = 1;
  const LowpRows r(c, 60);
  EXPECT_EQ(r.o_lowp, r.o);
  for (size_t d = 0; d < size_t(c.s.head_dim); ++d) EXPECT_EQ(r.o[d], double(r.v[d]));
  c = GetParam();
  if (!c.s.causal) return;
  const LowpRows causal(c, 61);
  for (size_t d = 0; d < size_t(c.s.head_dim); ++d) EXPECT_EQ(causal.o_lowp[d], causal.o[d]) << "row 0, " << d;
}

INSTANTIATE_TEST_SUITE_P(Small, LowpReference,
                         ::testing::Values(LowpCase{{1, 1, 9, 13, 16, 0.25, false}, fa::DType::F16},
                                           LowpCase{{1, 1, 9, 13, 16, 0.25, false}, fa::DType::BF16},
                                           LowpCase{{1, 1, 33, 20, 64, 0.125, true}, fa::DType::F16},
                                           LowpCase{{1, 1, 33, 20, 64, 0.125, true}, fa::DType::BF16},
                                           LowpCase{{1, 1, 5, 40, 128, 0.08838834764831845, false}, fa::DType::F16},
                                           LowpCase{{1, 1, 5, 40, 128, 0.08838834764831845, true}, fa::DType::BF16}),
                         [](const ::testing::TestParamInfo<LowpCase>& info) {
                           const ref::AttnShape& s = info.param.s;
                           return std::string(fa::dtype_name(info.param.t)) + "_q" + std::to_string(s.seq_q) + "_k" +
                                  std::to_string(s.seq_k) + "_d" + std::to_string(s.head_dim) +
                                  (s.causal ? "_causal" : "");
                         });

// ---- the low-precision backward (attention_backward_*_rows with a rounding) --------------------

// Every row of one head through attention_backward_stats, _dq_rows and _dkdv_rows.
struct BwdRows {
  Vec dq, dk, dv;
  BwdRows(const ref::AttnShape& s, const std::vector<float>& q, const std::vector<float>& k,
          const std::vector<float>& v, const std::vector<float>& dout, ref::Rounding round) {
    std::vector<int> qi(s.seq_q), kj(s.seq_k);
    for (int i = 0; i < s.seq_q; ++i) qi[i] = i;
    for (int j = 0; j < s.seq_k; ++j) kj[j] = j;
    Vec lse(s.seq_q), delta(s.seq_q);
    dq.resize(q.size()), dk.resize(k.size()), dv.resize(v.size());
    ref::attention_backward_stats(s, q.data(), k.data(), v.data(), dout.data(), qi.data(), s.seq_q, round, lse.data(),
                                  delta.data());
    ref::attention_backward_dq_rows(s, q.data(), k.data(), v.data(), dout.data(), qi.data(), s.seq_q, round, dq.data());
    ref::attention_backward_dkdv_rows(s, q.data(), k.data(), v.data(), dout.data(), lse.data(), delta.data(), kj.data(),
                                      s.seq_k, round, dk.data(), dv.data());
  }
};

// One head's 16-bit inputs (dO without the offset) and its backward in fp64 and in low precision.
struct LowpBwdCase {
  std::vector<float> q, k, v, dout;
  BwdRows fp64, lowp;
  LowpBwdCase(const LowpCase& c, unsigned seed)
      : q(lowp_vec(size_t(c.s.seq_q) * c.s.head_dim, seed, 0.5, c.t)),
        k(lowp_vec(size_t(c.s.seq_k) * c.s.head_dim, seed + 1, 0.5, c.t)),
        v(lowp_vec(size_t(c.s.seq_k) * c.s.head_dim, seed + 2, 0.5, c.t)),
        dout(lowp_vec(size_t(c.s.seq_q) * c.s.head_dim, seed + 3, 0.0, c.t)),
        fp64(c.s, q, k, v, dout, nullptr),
        lowp(c.s, q, k, v, dout, fa::rounding(c.t)) {}
};

double identity(double x) { return x; }
bool bits_equal(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }  // NaN and -0 too
double max_abs(const Vec& x) {
  double m = 0;
  for (double e : x) m = std::max(m, std::abs(e));
  return m;
}

class LowpBackward : public ::testing::TestWithParam<LowpCase> {};

// Without rounding (null, or a rounding that changes nothing) the rows are attention_backward's
// gradients up to fp64 roundoff (another summation order; delta as sum_j P_ij dP_ij without a
// rounding, as dO_i·O_i with one).
TEST_P(LowpBackward, WithoutRoundingItIsTheFp64Backward) {
  const LowpCase c = GetParam();
  const LowpBwdCase r(c, 70);
  // With a rounding that changes nothing, the low-precision path is the fp64 one up to fp64
  // roundoff: it takes delta = dO_i·O_i from the (unrounded) O, the fp64 path sum_j P_ij dP_ij.
  const BwdRows same(c.s, r.q, r.k, r.v, r.dout, identity);
  for (auto [name, got, want] : {std::tuple{"dq", &same.dq, &r.fp64.dq}, std::tuple{"dk", &same.dk, &r.fp64.dk},
                                 std::tuple{"dv", &same.dv, &r.fp64.dv}}) {
    ASSERT_EQ(got->size(), want->size()) << name;
    const double tol = 1e-13 * std::max(1.0, max_abs(*want));
    for (size_t i = 0; i < want->size(); ++i) ASSERT_NEAR((*got)[i], (*want)[i], tol) << name << "[" << i << "]";
  }
  const Vec q(r.q.begin(), r.q.end()), k(r.k.begin(), r.k.end()), v(r.v.begin(), r.v.end()),
      dout(r.dout.begin(), r.dout.end());
  Vec dq(q.size()), dk(k.size()), dv(v.size());
  ref::attention_backward(c.s, q.data(), k.data(), v.data(), dout.data(), dq.data(), dk.data(), dv.data());
  for (auto [name, got, want] :
       {std::tuple{"dq", &r.fp64.dq, &dq}, std::tuple{"dk", &r.fp64.dk, &dk}, std::tuple{"dv", &r.fp64.dv, &dv}}) {
    const double tol = 1e-13 * std::max(1.0, max_abs(*want));
    for (size_t i = 0; i < want->size(); ++i) ASSERT_NEAR((*got)[i], (*want)[i], tol) << name << "[" << i << "]";
  }
}

// The low-precision gradients: every element a value of the type, and an error vs fp64 of the
// size the roundings make, with u the unit roundoff (2^-11 f16, 2^-8 bf16). Each rounded quantity
// moves by a relative u, and a rounded score moves P by a relative ~u·max|S|; these reach a
// gradient through sums whose terms partly cancel, so its error is a few u·(1 + max|S|) of the
// gradient's scale. Bounds, against max|ref| of each gradient: above an eighth of its ulp (the
// roundings happened), below 8·u·(1 + max|S|)·max|ref| (measured: 0.7u to 3u on these cases,
// where a rounding in a wrong place, e.g. of an unscaled sum, errs by far more).
TEST_P(LowpBackward, ErrorIsThatOfTheRoundings) {
  const LowpCase c = GetParam();
  const ref::AttnShape& s = c.s;
  const LowpBwdCase r(c, 80);
  const double u = fa::ulp(c.t, 1.0) / 2;
  double smax = 0;
  for (int i = 0; i < s.seq_q; ++i)
    for (int j = 0; j < s.seq_k && !(s.causal && j > i); ++j) {
      double dot = 0;
      for (int d = 0; d < s.head_dim; ++d) dot += double(r.q[i * s.head_dim + d]) * double(r.k[j * s.head_dim + d]);
      smax = std::max(smax, std::abs(s.scale * dot));
    }
  for (auto [name, lo, hi] : {std::tuple{"dq", &r.lowp.dq, &r.fp64.dq}, std::tuple{"dk", &r.lowp.dk, &r.fp64.dk},
                              std::tuple{"dv", &r.lowp.dv, &r.fp64.dv}}) {
    double err = 0;
    for (size_t i = 0; i < hi->size(); ++i) {
      ASSERT_EQ(fa::round_to(c.t, (*lo)[i]), (*lo)[i])
          << name << "[" << i << "] is not a " << fa::dtype_name(c.t) << " value";
      err = std::max(err, std::abs((*lo)[i] - (*hi)[i]));
    }
    const double scale = max_abs(*hi);
    EXPECT_GT(err, fa::ulp(c.t, scale) / 8) << name << ": no rounding happened?";
    EXPECT_LE(err, 8 * u * (1 + smax) * scale) << name << ", max|S| " << smax;
  }
}

// The per-row rule of tolerance.h on the backward: ref_lowp itself passes (its error is half its
// bound); a copy of the fp64 gradient with one row moved by 3x that row's bound fails, and only in
// that row. Rows: query rows of dQ, key rows of dK and dV.
TEST_P(LowpBackward, PerRowBoundAcceptsRefLowpAndRejectsARowOffByThreeBounds) {
  const LowpCase c = GetParam();
  const LowpBwdCase r(c, 90);
  const size_t D = c.s.head_dim;
  for (auto [name, lo, hi] : {std::tuple{"dq", &r.lowp.dq, &r.fp64.dq}, std::tuple{"dk", &r.lowp.dk, &r.fp64.dk},
                              std::tuple{"dv", &r.lowp.dv, &r.fp64.dv}}) {
    const std::vector<double> bound = fa::lowp_row_bounds(*hi, *lo, D, c.t);
    const auto pass = fa::compare_rows(*lo, *hi, D, bound);
    EXPECT_TRUE(pass.ok()) << name << ": " << pass.summary();
    const size_t row = bound.size() / 2;
    Vec off = *hi;
    off[row * D + D / 2] += 3 * bound[row];
    const auto fail = fa::compare_rows(off, *hi, D, bound);
    EXPECT_FALSE(fail.ok()) << name;
    EXPECT_EQ(fail.failed_rows, 1u) << name;
    EXPECT_EQ(fail.worst_row, row) << name;
  }
}

// The rows in several precisions at once (the harness's references: fp64, low precision with and without a
// given O, fp64 with delta from a given O) are bit for bit one call per precision: each row's dot products are
// shared, their roundings and sums are not. A causal offset below zero leaves the first rows without a key.
TEST_P(LowpBackward, SeveralPrecisionsAtOnceAreEachPrecisionAlone) {
  LowpCase c = GetParam();
  if (c.s.causal) c.s.causal_offset = -3;
  const ref::AttnShape& s = c.s;
  const LowpBwdCase r(c, 90);
  const std::vector<float> o = lowp_vec(size_t(s.seq_q) * s.head_dim, 95, 0.5, c.t);  // an O the backward is given
  const std::vector<ref::BwdPrecision> precs = {
      {nullptr, nullptr}, {fa::rounding(c.t), nullptr}, {fa::rounding(c.t), o.data()}, {identity, o.data()}};
  const int n = int(precs.size()), D = s.head_dim;
  std::vector<Vec> lse(n, Vec(s.seq_q)), delta = lse;
  for (int i = 0; i < s.seq_q; ++i) {
    Vec l(n), d(n), l2(n), d2(n), dq_all(n * D);
    std::vector<double*> dq_out;
    for (int p = 0; p < n; ++p) dq_out.push_back(&dq_all[p * D]);
    ref::attention_backward_q_row(s, r.q.data(), r.k.data(), r.v.data(), r.dout.data(), i, precs.data(), n, l.data(),
                                  d.data(), dq_out.data());
    ref::attention_backward_q_row(s, r.q.data(), r.k.data(), r.v.data(), r.dout.data(), i, precs.data(), n, l2.data(),
                                  d2.data());  // the statistics alone
    for (int p = 0; p < n; ++p) ASSERT_TRUE(bits_equal(l[p], l2[p]) && bits_equal(d[p], d2[p])) << "precision " << p;
    for (int p = 0; p < n; ++p) {
      double l1 = 0, d1 = 0;
      Vec dq1(D);
      ref::attention_backward_stats(s, r.q.data(), r.k.data(), r.v.data(), r.dout.data(), &i, 1, precs[p].round, &l1,
                                    &d1, precs[p].o);
      ref::attention_backward_dq_rows(s, r.q.data(), r.k.data(), r.v.data(), r.dout.data(), &i, 1, precs[p].round,
                                      dq1.data(), precs[p].o);
      ASSERT_TRUE(bits_equal(l[p], l1) && bits_equal(d[p], d1)) << "precision " << p << ", row " << i;
      for (int e = 0; e < D; ++e) ASSERT_TRUE(bits_equal(dq_all[p * D + e], dq1[e])) << "dq, precision " << p;
      lse[p][i] = l1, delta[p][i] = d1;
    }
  }
  for (int j = 0; j < s.seq_k; ++j) {
    Vec dk_all(n * D), dv_all(n * D);
    std::vector<double*> dk_out, dv_out;
    std::vector<const double*> l, d;
    for (int p = 0; p < n; ++p)
      dk_out.push_back(&dk_all[p * D]), dv_out.push_back(&dv_all[p * D]), l.push_back(lse[p].data()),
          d.push_back(delta[p].data());
    ref::attention_backward_dkdv_row(s, r.q.data(), r.k.data(), r.v.data(), r.dout.data(), l.data(), d.data(), j,
                                     precs.data(), n, dk_out.data(), dv_out.data());
    for (int p = 0; p < n; ++p) {
      Vec dk1(D), dv1(D);
      ref::attention_backward_dkdv_rows(s, r.q.data(), r.k.data(), r.v.data(), r.dout.data(), lse[p].data(),
                                        delta[p].data(), &j, 1, precs[p].round, dk1.data(), dv1.data());
      for (int e = 0; e < D; ++e)
        ASSERT_TRUE(bits_equal(dk_all[p * D + e], dk1[e]) && bits_equal(dv_all[p * D + e], dv1[e]))
            << "dk/dv, precision " << p << ", key " << j;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Small, LowpBackward,
                         ::testing::Values(LowpCase{{1, 1, 9, 13, 16, 0.25, false}, fa::DType::F16},
                                           LowpCase{{1, 1, 9, 13, 16, 0.25, false}, fa::DType::BF16},
                                           LowpCase{{1, 1, 33, 20, 64, 0.125, true}, fa::DType::F16},
                                           LowpCase{{1, 1, 33, 20, 64, 0.125, true}, fa::DType::BF16},
                                           LowpCase{{1, 1, 40, 40, 128, 0.08838834764831845, true}, fa::DType::F16},
                                           LowpCase{{1, 1, 17, 70, 128, 0.08838834764831845, false}, fa::DType::BF16}),
                         [](const ::testing::TestParamInfo<LowpCase>& info) {
                           const ref::AttnShape& s = info.param.s;
                           return std::string(fa::dtype_name(info.param.t)) + "_q" + std::to_string(s.seq_q) + "_k" +
                                  std::to_string(s.seq_k) + "_d" + std::to_string(s.head_dim) +
                                  (s.causal ? "_causal" : "");
                         });

}  // namespace
