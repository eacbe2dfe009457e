// The environment knobs' parser (host/env.h) on the CPU: whole decimal numbers in range and nothing
// else, empty as not set, and the message a bad value gets; FA_FAKE_CC's two forms
// (harness/device_check.h) through the same parser.
#include <gtest/gtest.h>

#include <climits>
#include <cstdlib>
#include <string>
#include <utility>

#include "check.h"
#include "device_check.h"
#include "env.h"

namespace {

constexpr const char* kVar = "FA_TEST_ENV_KNOB";

class Env : public ::testing::Test {
 protected:
  void SetUp() override { unsetenv(kVar), unsetenv("FA_FAKE_CC"); }
  void TearDown() override { unsetenv(kVar), unsetenv("FA_FAKE_CC"); }
  static void set(const char* value) { setenv(kVar, value, 1); }
};

// The UsageError's message, or "" if none was thrown.
template <class F>
std::string usage_error(F&& f) {
  try {
    f();
  } catch (const fa::UsageError& e) {
    return e.what();
  }
  return "";
}

TEST(ParseWhole, AcceptsWholeNumbersInRange) {
  EXPECT_EQ(fa::parse_whole("8", 1, 64), 8);
  EXPECT_EQ(fa::parse_whole("1", 1, 64), 1);
  EXPECT_EQ(fa::parse_whole("64", 1, 64), 64);
  EXPECT_EQ(fa::parse_whole("008", 1, 64), 8);
  EXPECT_EQ(fa::parse_whole("0", 0, 1), 0);
  EXPECT_EQ(fa::parse_whole("-5", -10, 10), -5);
  EXPECT_EQ(fa::parse_whole("2147483647", 1, INT_MAX), INT_MAX);
  EXPECT_EQ(fa::parse_whole("9223372036854775807", 0, LLONG_MAX), LLONG_MAX);
  EXPECT_EQ(fa::parse_whole("-9223372036854775808", LLONG_MIN, 0), LLONG_MIN);
}

TEST(ParseWhole, RefusesOutOfRange) {
  EXPECT_EQ(fa::parse_whole("0", 1, 64), std::nullopt);
  EXPECT_EQ(fa::parse_whole("65", 1, 64), std::nullopt);
  EXPECT_EQ(fa::parse_whole("-1", 1, 64), std::nullopt);  // negative
  EXPECT_EQ(fa::parse_whole("-1", 0, 1), std::nullopt);
  EXPECT_EQ(fa::parse_whole("-11", -10, 10), std::nullopt);
}

TEST(ParseWhole, RefusesOverflowHoweverLong) {
  EXPECT_EQ(fa::parse_whole("2147483648", 1, INT_MAX), std::nullopt);
  EXPECT_EQ(fa::parse_whole("4294967304", 1, 64), std::nullopt);  // 2^32 + 8: 8 if cut to 32 bits
  EXPECT_EQ(fa::parse_whole("9223372036854775808", 0, LLONG_MAX), std::nullopt);
  EXPECT_EQ(fa::parse_whole("18446744073709551624", 0, LLONG_MAX), std::nullopt);  // 2^64 + 8
  EXPECT_EQ(fa::parse_whole("-9223372036854775809", LLONG_MIN, 0), std::nullopt);
  EXPECT_EQ(fa::parse_whole(std::string(100, '9'), 0, LLONG_MAX), std::nullopt);
}

TEST(ParseWhole, RefusesAnythingButDigits) {
  for (const char* s : {"", "-", "8abc", "abc", " 8", "8 ", "+8", "8.0", "0x10", "1e3", "-0", "--1", "8\n"})
    EXPECT_EQ(fa::parse_whole(s, -100, 100), std::nullopt) << '"' << s << '"';
}

TEST_F(Env, UnsetAndEmptyAreNotSet) {
  EXPECT_EQ(fa::env_value(kVar), std::nullopt);
  EXPECT_EQ(fa::env_int(kVar, 1, 64, "a count"), std::nullopt);
  EXPECT_TRUE(fa::env_switch(kVar, true, "a switch"));
  EXPECT_FALSE(fa::env_switch(kVar, false, "a switch"));
  set("");
  EXPECT_EQ(fa::env_value(kVar), std::nullopt);
  EXPECT_EQ(fa::env_int(kVar, 1, 64, "a count"), std::nullopt);
  EXPECT_TRUE(fa::env_switch(kVar, true, "a switch"));
}

TEST_F(Env, IntReadsAValueInRange) {
  set("8");
  EXPECT_EQ(fa::env_value(kVar), "8");
  EXPECT_EQ(fa::env_int(kVar, 1, 64, "a count"), 8);
  set("64");
  EXPECT_EQ(fa::env_int(kVar, 1, 64, "a count"), 64);
}

TEST_F(Env, IntRefusesTrailingGarbageNamingVariableValueAndRange) {
  set("8abc");
  EXPECT_EQ(usage_error([] { fa::env_int(kVar, 1, 64, "the number of splits"); }),
            "FA_TEST_ENV_KNOB=8abc: expected a whole number from 1 to 64 (the number of splits)");
}

TEST_F(Env, IntRefusesWhatAtoiWouldHaveRead) {
  // atoi: "abc" 0, "8abc" 8, " 8" 8, "-3" -3, "99999999999" garbage; all errors now.
  for (const char* v : {"abc", "8abc", " 8", "+8", "-3", "0", "65", "99999999999", "8.5"}) {
    set(v);
    const std::string m = usage_error([] { fa::env_int(kVar, 1, 64, "a count"); });
    EXPECT_EQ(m, std::string(kVar) + "=" + v + ": expected a whole number from 1 to 64 (a count)") << v;
  }
}

TEST_F(Env, SwitchIsZeroOrOne) {
  set("0");
  EXPECT_FALSE(fa::env_switch(kVar, true, "a switch"));
  set("1");
  EXPECT_TRUE(fa::env_switch(kVar, false, "a switch"));
  for (const char* v : {"2", "-1", "yes", "off", "1x", "01x"}) {
    set(v);
    EXPECT_EQ(usage_error([] { fa::env_switch(kVar, true, "0: off; 1: on"); }),
              std::string(kVar) + "=" + v + ": expected 0 or 1 (0: off; 1: on)")
        << v;
  }
}

TEST_F(Env, FakeCcTakesBothForms) {
  EXPECT_EQ(fa::fake_cc(), 0);
  const std::pair<const char*, int> forms[] = {{"", 0},     {"80", 80},    {"8.0", 80},
                                               {"9.0", 90}, {"10.0", 100}, {"120", 120}};
  for (const auto& [text, cc] : forms) {
    setenv("FA_FAKE_CC", text, 1);
    EXPECT_EQ(fa::fake_cc(), cc) << '"' << text << '"';
  }
}

TEST_F(Env, FakeCcRefusesGarbage) {
  // sscanf read "80abc" as 80, "8.0abc" as 80 and "8.10" as 90.
  for (const char* v : {"abc", "80abc", "8.0abc", "8.10", "8.", ".0", "8", "0", "-80", "8.-0", "1000", "8,0", " 80"}) {
    setenv("FA_FAKE_CC", v, 1);
    const std::string m = usage_error([] { fa::fake_cc(); });
    EXPECT_EQ(m.rfind(std::string("FA_FAKE_CC=") + v + ": expected a compute capability such as 80 or 8.0", 0), 0u)
        << v << ": " << m;
  }
}

}  // namespace
