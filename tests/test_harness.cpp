// CPU tests of the harness in common/: compare, the CLI parser, the seeded random fill.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "check.h"
#include "cli.h"
#include "compare.h"
#include "random.h"

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
  expect_usage_error({"--rows", "99999999999999999999"}, "is not an integer");
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

TEST(Random, FreshSeedsDiffer) { EXPECT_NE(fa::fresh_seed(), fa::fresh_seed()); }

}  // namespace
