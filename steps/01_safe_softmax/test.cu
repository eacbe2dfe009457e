// Step 01 (safe softmax) against the fp64 reference: golden data, fresh random rows of every
// awkward length, and the rows that break a naive softmax.
#include "softmax_checks.h"

namespace step01 {
const fa::StepInfo& info();
}

namespace {
const fa::SoftmaxLauncher kStep = step01::info().softmax;

TEST(Step01SafeSoftmax, MatchesGoldenData) { softmax_checks::expect_matches_golden(kStep); }
TEST(Step01SafeSoftmax, MatchesFp64AtEveryLength) { softmax_checks::expect_all_lengths(kStep); }
TEST(Step01SafeSoftmax, SplitLongRowsMatchFp64) {
  softmax_checks::expect_matches_reference(kStep, 3, 1 << 22);        // float4 path, 256 chunks a row
  softmax_checks::expect_matches_reference(kStep, 2, (1 << 22) + 1);  // scalar path
}
TEST(Step01SafeSoftmax, SpecialRows) { softmax_checks::expect_special_rows(kStep); }
TEST(Step01SafeSoftmax, RejectsEmptyProblem) {
  EXPECT_THROW(kStep({nullptr, nullptr, 0, 16}, nullptr), fa::UsageError);
  EXPECT_THROW(kStep({nullptr, nullptr, 16, 0}, nullptr), fa::UsageError);
}
}  // namespace
