// Step 02 (online softmax) against step 01 on the same inputs (realistic shapes, both the
// one-block-per-row and the split-row paths), and against the fp64 reference on the edge cases.
#include "softmax_checks.h"

namespace step01 {
const fa::StepInfo& info();
}
namespace step02 {
const fa::StepInfo& info();
}

namespace {
const fa::SoftmaxLauncher kStep = step02::info().softmax;
const fa::SoftmaxLauncher kPrev = step01::info().softmax;

TEST(Step02OnlineSoftmax, MatchesStep01) {
  struct Shape {
    int rows, cols;
  };
  for (const Shape s :
       {Shape{4096, 4096}, Shape{1000, 777}, Shape{64, 1 << 20}, Shape{300, 20000}, Shape{100000, 33}}) {
    const std::uint64_t seed = fa::fresh_seed();
    const auto x = softmax_checks::random_rows(s.rows, s.cols, seed);
    const auto y = softmax_checks::run(kStep, x, s.rows, s.cols);
    const auto y_prev = softmax_checks::run(kPrev, x, s.rows, s.cols);
    const auto r = fa::compare(y, y_prev, softmax_checks::kTol, {std::size_t(s.rows), std::size_t(s.cols)});
    EXPECT_TRUE(r.ok()) << s.rows << "x" << s.cols << " seed " << seed << ": " << r.summary();
  }
}
TEST(Step02OnlineSoftmax, MatchesGoldenData) { softmax_checks::expect_matches_golden(kStep); }
TEST(Step02OnlineSoftmax, MatchesFp64AtEveryLength) { softmax_checks::expect_all_lengths(kStep); }
TEST(Step02OnlineSoftmax, SplitLongRowsMatchFp64) {
  softmax_checks::expect_matches_reference(kStep, 3, 1 << 22);
  softmax_checks::expect_matches_reference(kStep, 2, (1 << 22) + 1);
}
TEST(Step02OnlineSoftmax, SpecialRows) { softmax_checks::expect_special_rows(kStep); }
TEST(Step02OnlineSoftmax, RejectsEmptyProblem) {
  EXPECT_THROW(kStep({nullptr, nullptr, 0, 16}, nullptr), fa::UsageError);
}
}  // namespace
