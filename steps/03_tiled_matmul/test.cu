// Step 03 (tiled matmul) against the fp64 reference (ref::matmul): the golden matmul cases of
// tests/data, then fresh random problems around every boundary of the kernel: the 128-row and
// 64/128-column tiles, the 8-wide K slabs, the float4 quads (sizes and pointers that force the
// scalar loads and stores), K = 1, batches with strides, alpha, and both tile configurations.
// Every element of C is checked; C is NaN-poisoned before each launch, and the poison around C
// (before it, and between batch entries) must survive: the kernel writes C and nothing else.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "buffer.h"
#include "compare.h"
#include "golden.h"
#include "npy.h"
#include "ops.h"
#include "random.h"
#include "reference.h"

namespace step03 {
const fa::StepInfo& info();
}

namespace {
using fa::MatmulLayout;
const fa::MatmulLauncher kStep = step03::info().matmul;

// fp32 GEMM vs fp64: |c - ref| <= 1e-5·max|ref| + 1e-5·|ref| (the harness's rule,
// fa::scaled_tolerance in harness/runner.h, which the tests do not link). A K-term fp32 dot product
// is off by about sqrt(K)·6e-8 relative; at K = 1024 that is ~2e-6, well inside.
constexpr double kAtolRel = 1e-5, kRtol = 1e-5;
fa::Tolerance tolerance(const std::vector<double>& ref) {
  double m = 0;
  for (double v : ref)
    if (std::isfinite(v)) m = std::max(m, std::abs(v));
  return {kAtolRel * (m > 0 ? m : 1.0), kRtol};
}

const char* name(MatmulLayout l) { return l == MatmulLayout::NT ? "NT" : l == MatmulLayout::NN ? "NN" : "TN"; }

struct Problem {
  MatmulLayout layout;
  int M, N, K;
  int batch = 1;
  float alpha = 1.f;
  int off_a = 0, off_b = 0, off_c = 0;  // floats each pointer is shifted by (1: not 16-byte aligned)
  int pad = 0;                          // floats between batch entries (stride = matrix size + pad)

  long long size_a() const { return (long long)M * K; }
  long long size_b() const { return (long long)K * N; }
  long long size_c() const { return (long long)M * N; }
  std::string describe() const {
    return std::to_string(M) + "x" + std::to_string(N) + "x" + std::to_string(K) + " " + name(layout) + " batch " +
           std::to_string(batch) + " alpha " + std::to_string(alpha) + " offsets " + std::to_string(off_a) + "/" +
           std::to_string(off_b) + "/" + std::to_string(off_c) + " pad " + std::to_string(pad);
  }
};

// fp64 C [batch, M, N] of the problem; A, B hold the batch entries back to back (no padding).
std::vector<double> reference(const Problem& p, const std::vector<float>& A, const std::vector<float>& B) {
  std::vector<double> C(p.batch * p.size_c());
  for (int b = 0; b < p.batch; ++b) {
    const float* Ab = A.data() + b * p.size_a();
    std::vector<double> a(p.size_a()), bd(B.begin() + b * p.size_b(), B.begin() + (b + 1) * p.size_b());
    for (int m = 0; m < p.M; ++m)  // ref::matmul takes A as [M, K]: transpose TN's [K, M]
      for (int k = 0; k < p.K; ++k)
        a[(long long)m * p.K + k] =
            p.layout == MatmulLayout::TN ? Ab[(long long)k * p.M + m] : Ab[(long long)m * p.K + k];
    ref::matmul(a.data(), bd.data(), C.data() + b * p.size_c(), p.M, p.N, p.K, p.alpha, p.layout == MatmulLayout::NT);
  }
  return C;
}

// Runs the step; returns C [batch, M, N]. Checks that the NaN poison outside C is untouched.
std::vector<float> run(const Problem& p, const std::vector<float>& A, const std::vector<float>& B) {
  const long long sa = p.size_a() + p.pad, sb = p.size_b() + p.pad, sc = p.size_c() + p.pad;
  fa::DeviceBuffer<float> dA(p.off_a + sa * p.batch), dB(p.off_b + sb * p.batch), dC(p.off_c + sc * p.batch);
  for (int b = 0; b < p.batch; ++b) {
    FA_CUDA_CHECK(cudaMemcpy(dA.get() + p.off_a + b * sa, A.data() + b * p.size_a(), p.size_a() * sizeof(float),
                             cudaMemcpyHostToDevice));
    FA_CUDA_CHECK(cudaMemcpy(dB.get() + p.off_b + b * sb, B.data() + b * p.size_b(), p.size_b() * sizeof(float),
                             cudaMemcpyHostToDevice));
  }
  dC.poison_nan();
  kStep({dA.get() + p.off_a, dB.get() + p.off_b, dC.get() + p.off_c, p.M, p.N, p.K, p.alpha, p.layout, p.batch, sa, sb,
         sc},
        nullptr);
  FA_CHECK_LAUNCH();
  FA_CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<float> all = dC.download();
  std::vector<float> C(p.batch * p.size_c());
  std::size_t written_outside = 0;
  for (long long i = 0; i < (long long)all.size(); ++i) {
    const long long rel = i - p.off_c, b = rel / sc, w = rel % sc;
    if (rel >= 0 && w < p.size_c())
      C[b * p.size_c() + w] = all[i];
    else
      written_outside += !std::isnan(all[i]);
  }
  EXPECT_EQ(written_outside, 0u) << p.describe() << ": wrote outside C";
  return C;
}

// Fresh inputs in [-0.5, 1.5) (offset +0.5, so C is not near zero; a new seed every run).
void expect_matches_reference(const Problem& p) {
  const std::uint64_t seed = fa::fresh_seed();
  std::vector<float> A(p.batch * p.size_a()), B(p.batch * p.size_b());
  fa::fill_uniform(A, seed, -0.5f, 1.5f);
  fa::fill_uniform(B, seed + 1, -0.5f, 1.5f);
  const std::vector<double> ref = reference(p, A, B);
  const auto r =
      fa::compare(run(p, A, B), ref, tolerance(ref), {std::size_t(p.batch), std::size_t(p.M), std::size_t(p.N)});
  EXPECT_TRUE(r.ok()) << p.describe() << " seed " << seed << ": " << r.summary();
}

constexpr MatmulLayout kLayouts[] = {MatmulLayout::NT, MatmulLayout::NN, MatmulLayout::TN};

// Every golden matmul case of tests/data (NumPy, fp64 math on fp32 inputs), every element.
TEST(Step03TiledMatmul, MatchesGoldenData) {
  const auto cases = golden::cases(FA_DATA_DIR, "matmul");
  ASSERT_FALSE(cases.empty());
  for (const auto& c : cases) {
    Problem p{c.param("layout") == "nt" ? MatmulLayout::NT : MatmulLayout::NN, int(c.integer("M")), int(c.integer("N")),
              int(c.integer("K"))};
    p.alpha = float(c.number("alpha"));
    ASSERT_TRUE(c.param("layout") == "nt" || c.param("layout") == "nn") << c.name;
    const fa::NpyArray a = fa::read_npy(c.path("a")), b = fa::read_npy(c.path("b")), ref = fa::read_npy(c.path("c"));
    ASSERT_EQ(a.size(), std::size_t(p.size_a())) << c.name;
    ASSERT_EQ(b.size(), std::size_t(p.size_b())) << c.name;
    const std::vector<float> af(a.data.begin(), a.data.end()), bf(b.data.begin(), b.data.end());
    const auto r = fa::compare(run(p, af, bf), ref.data, tolerance(ref.data), {std::size_t(p.M), std::size_t(p.N)});
    EXPECT_TRUE(r.ok()) << c.name << ": " << r.summary();
  }
}

// Square sizes on both sides of every boundary: 4 (quads), 8 (K slab), 64 and 128 (tiles).
TEST(Step03TiledMatmul, EveryTileBoundary) {
  for (const MatmulLayout l : kLayouts)
    for (const int s : {1, 7, 8, 9, 63, 64, 65, 127, 128, 129, 255, 300}) expect_matches_reference({l, s, s, s});
}

TEST(Step03TiledMatmul, RectangularShapes) {
  struct Shape {
    int M, N, K;
  };
  for (const MatmulLayout l : kLayouts)
    for (const Shape s : {Shape{100, 70, 33}, Shape{129, 65, 300}, Shape{1, 300, 17}, Shape{300, 1, 255},
                          Shape{65, 129, 8}, Shape{7, 9, 1000}, Shape{256, 64, 64}, Shape{64, 256, 128}})
      expect_matches_reference({l, s.M, s.N, s.K});
}

TEST(Step03TiledMatmul, KEqualsOne) {
  for (const MatmulLayout l : kLayouts) {
    expect_matches_reference({l, 130, 200, 1});
    expect_matches_reference({l, 1, 1, 1});
  }
}

TEST(Step03TiledMatmul, Alpha) {
  for (const MatmulLayout l : kLayouts) {
    expect_matches_reference({l, 100, 132, 40, 1, -1.25f});
    expect_matches_reference({l, 65, 63, 77, 1, 0.125f});
  }
}

// Batches with strides: padded by 4 floats (float4 path still possible) and by 1 (scalar path).
TEST(Step03TiledMatmul, StridedBatch) {
  for (const MatmulLayout l : kLayouts) {
    expect_matches_reference({l, 100, 132, 72, 3, 1.f, 0, 0, 0, 4});
    expect_matches_reference({l, 100, 132, 72, 3, 0.5f, 0, 0, 0, 1});
    expect_matches_reference({l, 33, 17, 9, 3, 1.f, 0, 0, 0, 0});
  }
}

// Pointers 1 float off a 16-byte boundary: scalar loads of that operand (or scalar stores of C),
// one operand at a time and all together, with sizes that would otherwise take the float4 path.
TEST(Step03TiledMatmul, MisalignedPointers) {
  for (const MatmulLayout l : kLayouts) {
    expect_matches_reference({l, 132, 136, 40, 1, 1.f, 1, 1, 1});
    expect_matches_reference({l, 132, 136, 40, 1, 1.f, 1, 0, 0});
    expect_matches_reference({l, 132, 136, 40, 1, 1.f, 0, 1, 0});
    expect_matches_reference({l, 132, 136, 40, 1, 1.f, 0, 0, 1});
    expect_matches_reference({l, 128, 64, 64, 2, 1.f, 1, 1, 1, 4});
  }
}

// Enough 128×128 tiles (3·3·24 = 216, more than an H100's 132 SMs) that the launcher picks the
// big tile for N > 64; float4 (sizes multiple of 4) and scalar (odd sizes) paths.
TEST(Step03TiledMatmul, BigTiles) {
  for (const MatmulLayout l : kLayouts) {
    expect_matches_reference({l, 384, 260, 32, 24});
    expect_matches_reference({l, 385, 259, 35, 24, 0.75f});
    expect_matches_reference({l, 384, 260, 32, 24, 1.f, 1, 0, 1});
  }
}

// The shapes of attention (step 04), small: S = Q·Kᵀ (K = head_dim), O = P·V and dV = Pᵀ·dO
// (N = head_dim), batched over heads, with an odd sequence length.
TEST(Step03TiledMatmul, AttentionShapes) {
  expect_matches_reference({MatmulLayout::NT, 333, 333, 64, 4, 0.125f});
  expect_matches_reference({MatmulLayout::NN, 333, 64, 333, 4});
  expect_matches_reference({MatmulLayout::TN, 333, 128, 333, 4});
}

TEST(Step03TiledMatmul, Large1024) {
  for (const MatmulLayout l : kLayouts) expect_matches_reference({l, 1024, 1024, 1024});
}

TEST(Step03TiledMatmul, RejectsEmptyProblem) {
  const fa::MatmulArgs ok{nullptr, nullptr, nullptr, 4, 4, 4, 1.f, MatmulLayout::NN};
  for (int field = 0; field < 4; ++field)
    for (const int bad : {0, -1}) {
      fa::MatmulArgs a = ok;
      (field == 0 ? a.M : field == 1 ? a.N : field == 2 ? a.K : a.batch) = bad;
      EXPECT_THROW(kStep(a, nullptr), fa::UsageError) << "field " << field << " = " << bad;
    }
}
}  // namespace
