// CPU tests of the command line (harness/cli.cpp and the flag handling of harness/runner.cpp and
// the families): a flag given twice, declared conflicts, numbers too large to represent, refused
// flags, each step's --help listing only what it accepts, --input read and checked against the
// shape flags before any device work, run_all --steps, and the results table's alignment.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "check.h"
#include "cli.h"
#include "lowp.h"
#include "runner.h"

namespace {

const std::string kData = FA_DATA_DIR;

// ---- the parser -------------------------------------------------------------------------------
struct Cli {
  long long rows = 7, cols = 3;
  double scale = 0.5;
  bool check = false, bench = false;
  fa::ArgParser p{"prog", "test program"};
  Cli() {
    p.add_int("--rows", &rows, 1, 100, "the row count");
    p.add_int("--cols", &cols, -5, 5, "cols");
    p.add_double("--scale", &scale, -10.0, 10.0, "scale");
    p.add_flag("--check", &check, "whether to check");
    p.add_flag("--bench", &bench, "bench");
    p.conflicts("--rows", "--cols", "pick one");
    p.conflicts("--check", "--bench");
    p.refuse("--bwd", "this program has no backward pass");
  }
  bool parse(std::vector<const char*> args) {
    args.insert(args.begin(), "prog");
    return p.parse(int(args.size()), args.data());
  }
};

// The UsageError message of parsing `args` ("" if it parses).
std::string error_of(std::vector<const char*> args) {
  Cli c;
  try {
    c.parse(args);
  } catch (const fa::UsageError& e) {
    return e.what();
  }
  return "";
}

TEST(Cli, AFlagGivenTwiceIsAnError) {
  EXPECT_EQ(error_of({"--rows", "3", "--rows", "4"}), "--rows given twice");
  EXPECT_EQ(error_of({"--rows=3", "--rows", "3"}), "--rows given twice");  // even with the same value
  EXPECT_EQ(error_of({"--check", "--check"}), "--check given twice");
}

// --help takes no value: "--help=1" says so, as any other switch given a value does.
TEST(Cli, HelpGivenAValueIsNamedAsAFlagThatTakesNone) {
  EXPECT_EQ(error_of({"--help=1"}), "--help takes no value");
  EXPECT_EQ(error_of({"--help="}), "--help takes no value");
  EXPECT_EQ(error_of({"--check=1"}), "--check takes no value");
}

TEST(Cli, DeclaredConflictsAreErrorsInEitherOrder) {
  EXPECT_EQ(error_of({"--rows", "3", "--cols", "2"}), "--rows conflicts with --cols (pick one)");
  EXPECT_EQ(error_of({"--cols", "2", "--rows", "3"}), "--rows conflicts with --cols (pick one)");
  EXPECT_EQ(error_of({"--bench", "--check"}), "--check conflicts with --bench");
  EXPECT_EQ(error_of({"--rows", "3", "--check"}), "");  // not declared: fine
  Cli c;
  EXPECT_THROW(c.p.conflicts("--rows", "--nope"), fa::Error);  // a typo in the declaration
}

TEST(Cli, NumbersTooLargeToRepresentAreOutOfRange) {
  EXPECT_EQ(error_of({"--rows", "99999999999999999999999"}),
            "--rows: 99999999999999999999999 is out of range [1, 100]");
  EXPECT_EQ(error_of({"--cols", "-99999999999999999999999"}),
            "--cols: -99999999999999999999999 is out of range [-5, 5]");
  EXPECT_EQ(error_of({"--scale", "1e999"}), "--scale: 1e999 is out of range [-10, 10]");
  EXPECT_EQ(error_of({"--scale", "-1e999"}), "--scale: -1e999 is out of range [-10, 10]");
  EXPECT_EQ(error_of({"--scale", "inf"}), "--scale: inf is out of range [-10, 10]");
  // Malformed stays malformed.
  EXPECT_EQ(error_of({"--rows", "12x"}), "--rows: '12x' is not an integer");
  EXPECT_EQ(error_of({"--rows", " "}), "--rows: ' ' is not an integer");
  EXPECT_EQ(error_of({"--scale", "nan"}), "--scale: 'nan' is not a finite number");
  EXPECT_EQ(error_of({"--scale", "x"}), "--scale: 'x' is not a finite number");
}

TEST(Cli, RefusedFlagSaysWhyAndIsNotInHelp) {
  EXPECT_EQ(error_of({"--bwd"}), "--bwd: this program has no backward pass");
  Cli c;
  EXPECT_EQ(c.p.help().find("--bwd"), std::string::npos);
  const std::vector<std::string> names = c.p.flag_names();
  EXPECT_EQ(std::count(names.begin(), names.end(), "--bwd"), 0);
}

TEST(Cli, HelpListsFlagsAlignedAndTheConflicts) {
  Cli c;
  const std::string h = c.p.help();
  for (const char* f :
       {"usage: prog", "--rows N", "--scale X", "--check", "--help", "--rows", "not with --cols", "not with --bench"})
    EXPECT_NE(h.find(f), std::string::npos) << f << "\n" << h;
  // Every flag's text starts in the same column.
  auto column = [&](const std::string& text) {
    const std::size_t at = h.find(text);
    EXPECT_NE(at, std::string::npos) << text;
    return at - (h.rfind('\n', at) + 1);
  };
  EXPECT_EQ(column("the row count"), column("whether to check"));
  EXPECT_EQ(column("the row count"), column("this text"));
  EXPECT_GT(column("the row count"), std::string("  --scale X").size());
}

// ---- a step's flags ---------------------------------------------------------------------------
// A stand-in attention step (no kernels are launched).
fa::StepInfo attention_step(std::vector<fa::DType> types, bool backward) {
  fa::StepInfo s{"99_stand_in", "a stand-in step", fa::Family::Attention};
  s.attn_rule.dtypes = std::move(types);
  if (backward) s.attn_bwd = [](const fa::AttnBwdArgs&, cudaStream_t) {};
  return s;
}

std::string step_help(const fa::StepInfo& s) {
  fa::ArgParser parser(s.name, s.idea);
  fa::Problem p = fa::default_problem(s);
  fa::family_ops(s.family).add_shape_flags(parser, s, p);
  return parser.help();
}

TEST(StepFlags, DtypeOffersTheStepsTypesDefaultFirst) {
  const std::string lowp = step_help(attention_step({fa::DType::F16, fa::DType::BF16}, false));
  EXPECT_NE(lowp.find("default f16"), std::string::npos) << lowp;
  EXPECT_NE(lowp.find("(f16|bf16)"), std::string::npos) << lowp;
  EXPECT_EQ(lowp.find("f32"), std::string::npos) << lowp;
  const std::string fp32 = step_help(attention_step({fa::DType::F32}, true));
  EXPECT_NE(fp32.find("default f32"), std::string::npos) << fp32;
  EXPECT_NE(fp32.find("(f32)"), std::string::npos) << fp32;
  EXPECT_EQ(fp32.find("f16"), std::string::npos) << fp32;
}

TEST(StepFlags, HeadDimStatesTheStepsRule) {
  fa::StepInfo s = attention_step({fa::DType::F16}, false);
  s.attn_rule.max_head_dim = 96, s.attn_rule.head_dim_multiple = 8;
  EXPECT_NE(step_help(s).find("(this step: a multiple of 8, at most 96)"), std::string::npos) << step_help(s);
  s.attn_rule.head_dim_multiple = 1;
  EXPECT_NE(step_help(s).find("(this step: at most 96)"), std::string::npos) << step_help(s);
}

TEST(StepFlags, BwdOnlyForAStepWithABackward) {
  EXPECT_EQ(step_help(attention_step({fa::DType::F32}, false)).find("--bwd"), std::string::npos);
  EXPECT_NE(step_help(attention_step({fa::DType::F32}, true)).find("--bwd"), std::string::npos);
  EXPECT_NE(step_help(attention_step({fa::DType::F32}, true)).find("dout.npy"), std::string::npos);
}

TEST(StepFlags, EveryFamilyListsInput) {
  fa::StepInfo softmax{"98_s", "s", fa::Family::Softmax}, matmul{"97_m", "m", fa::Family::Matmul};
  for (const fa::StepInfo* s : {&softmax, &matmul}) EXPECT_NE(step_help(*s).find("--input S"), std::string::npos);
  EXPECT_NE(step_help(attention_step({fa::DType::F32}, false)).find("--input S"), std::string::npos);
}

// The problem and RunOptions a step's flags give (as step_main resolves them), or the UsageError.
struct Resolved {
  fa::Problem p;
  fa::RunOptions o;
  std::string error;
};
Resolved resolve(const fa::StepInfo& s, std::vector<const char*> args) {
  Resolved r;
  fa::ArgParser parser(s.name, s.idea);
  r.p = fa::default_problem(s);
  const fa::FamilyOps& fam = fa::family_ops(s.family);
  fam.add_shape_flags(parser, s, r.p);
  args.insert(args.begin(), "prog");
  try {
    parser.parse(int(args.size()), args.data());
    fam.resolve(parser, r.p, r.o);
  } catch (const fa::UsageError& e) {
    r.error = e.what();
  }
  return r;
}
bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// --inputs uniform|randn: uniform unless given; any other value, a value missing, --inputs twice or beside
// --input (files) is a usage error naming the flag; --help documents both values.
TEST(StepFlags, InputsPicksUniformOrRandnStrictly) {
  const fa::StepInfo s = attention_step({fa::DType::F32, fa::DType::F16}, true);
  EXPECT_FALSE(resolve(s, {}).o.randn);
  EXPECT_FALSE(resolve(s, {"--inputs", "uniform"}).o.randn);
  const Resolved randn = resolve(s, {"--inputs=randn", "--seq", "64"});
  EXPECT_EQ(randn.error, "");
  EXPECT_TRUE(randn.o.randn);
  EXPECT_EQ(randn.p.describe(), "B8 H32 S64 D64 f32");  // the shape's name is unchanged (the rows add " randn")
  EXPECT_EQ(resolve(s, {"--inputs", "normal"}).error, "--inputs: 'normal' is not one of: uniform, randn");
  EXPECT_EQ(resolve(s, {"--inputs", "Randn"}).error, "--inputs: 'Randn' is not one of: uniform, randn");
  EXPECT_EQ(resolve(s, {"--inputs", ""}).error, "--inputs needs a value");
  EXPECT_EQ(resolve(s, {"--inputs"}).error, "--inputs needs a value");
  EXPECT_EQ(resolve(s, {"--inputs", "randn", "--inputs", "uniform"}).error, "--inputs given twice");
  EXPECT_EQ(resolve(s, {"--inputs", "randn", "--input", "x"}).error,
            "--input conflicts with --inputs (--input reads the inputs from files)");
  const std::string help = step_help(s);
  EXPECT_TRUE(contains(help, "--inputs S")) << help;
  EXPECT_TRUE(contains(help, "standard normal")) << help;
  EXPECT_TRUE(contains(help, "(uniform|randn)")) << help;
}

TEST(StepFlags, SeqConflictsWithSeqQAndSeqK) {
  const fa::StepInfo s = attention_step({fa::DType::F32}, false);
  EXPECT_EQ(resolve(s, {"--seq", "64", "--seq-q", "32"}).error,
            "--seq conflicts with --seq-q (--seq sets both lengths)");
  EXPECT_EQ(resolve(s, {"--seq-k", "32", "--seq", "64"}).error,
            "--seq conflicts with --seq-k (--seq sets both lengths)");
  EXPECT_EQ(resolve(s, {"--seq-q", "32", "--seq-k", "64"}).error, "");
}

TEST(StepFlags, SizeConflictsWithMNK) {
  const fa::StepInfo s{"97_m", "m", fa::Family::Matmul};
  EXPECT_TRUE(contains(resolve(s, {"--k", "3", "--size", "64"}).error, "--size conflicts with --k"));
}

// ---- --input ----------------------------------------------------------------------------------
TEST(Input, AttentionReadsQKVAndTakesTheShapeFromThem) {
  const fa::StepInfo s = attention_step({fa::DType::F32}, true);
  const std::string prefix = kData + "/at_q33_k70_d64_b1h2";
  const Resolved r = resolve(s, {"--input", prefix.c_str()});
  ASSERT_EQ(r.error, "");
  EXPECT_EQ(r.p.describe(), "B1 H2 Sq33 Sk70 D64 f32");
  EXPECT_FLOAT_EQ(r.p.attn.scale, 0.125f);
  ASSERT_EQ(r.o.inputs.size(), 3u);
  EXPECT_EQ(r.o.inputs[0].size(), 2u * 33 * 64);
  EXPECT_EQ(r.o.inputs[1].size(), 2u * 70 * 64);
  // With --bwd, dO as well; shape flags that agree are fine.
  const Resolved b = resolve(s, {"--input", prefix.c_str(), "--bwd", "--seq-q", "33", "--heads", "2"});
  ASSERT_EQ(b.error, "");
  EXPECT_EQ(b.o.inputs.size(), 4u);
  EXPECT_EQ(b.o.inputs[3].size(), b.o.inputs[0].size());
}

TEST(Input, AttentionValuesAreRoundedToTheStepsType) {
  const fa::StepInfo s = attention_step({fa::DType::F16}, false);
  const Resolved r = resolve(s, {"--input", (kData + "/at_q1_k1_d64").c_str()});
  ASSERT_EQ(r.error, "");
  for (const auto& t : r.o.inputs)
    for (float x : t) EXPECT_EQ(x, fa::round_to(fa::DType::F16, x));
}

TEST(Input, AttentionShapeMismatchAndMissingFiles) {
  const fa::StepInfo s = attention_step({fa::DType::F32}, false);
  const std::string prefix = kData + "/at_q100_k100_d128_b1h2";
  const Resolved seq = resolve(s, {"--input", prefix.c_str(), "--seq", "64"});
  EXPECT_TRUE(contains(seq.error, "--seq 64 does not match the --input files")) << seq.error;
  EXPECT_TRUE(contains(seq.error, "at_q100_k100_d128_b1h2.q.npy' is [1, 2, 100, 128]")) << seq.error;
  EXPECT_TRUE(
      contains(resolve(s, {"--input", prefix.c_str(), "--head-dim", "64"}).error, "--head-dim 64 does not match"));
  EXPECT_TRUE(contains(resolve(s, {"--input", "/nonexistent/x"}).error, "cannot open '/nonexistent/x.q.npy'"));
}

TEST(Input, MatmulReadsAAndBPerLayout) {
  const fa::StepInfo s{"97_m", "m", fa::Family::Matmul};
  const std::string nn = kData + "/mm_nn_17x23x31", nt = kData + "/mm_nt_17x23x31";
  const Resolved a = resolve(s, {"--input", nn.c_str()});
  ASSERT_EQ(a.error, "");
  EXPECT_EQ(a.p.describe(), "17x23x31 NN");
  ASSERT_EQ(a.o.inputs.size(), 2u);
  EXPECT_EQ(a.o.inputs[0].size(), 17u * 31);
  EXPECT_EQ(a.o.inputs[1].size(), 31u * 23);
  const Resolved b = resolve(s, {"--input", nt.c_str(), "--layout", "nt", "--m", "17"});
  ASSERT_EQ(b.error, "");
  EXPECT_EQ(b.p.describe(), "17x23x31 NT");
  // The wrong layout: A and B disagree on K.
  const std::string wrong = resolve(s, {"--input", nt.c_str()}).error;
  EXPECT_TRUE(contains(wrong, "A has K = 31, B has K = 23")) << wrong;
  EXPECT_TRUE(contains(wrong, "--layout nn: A [M, K], B [K, N]")) << wrong;
  EXPECT_TRUE(
      contains(resolve(s, {"--input", nn.c_str(), "--n", "24"}).error, "--n 24 does not match the --input files"));
  EXPECT_TRUE(contains(resolve(s, {"--input", nn.c_str(), "--size", "17"}).error, "--size 17 does not match"));
  EXPECT_TRUE(contains(resolve(s, {"--input", "/nonexistent/x"}).error, "cannot open '/nonexistent/x.a.npy'"));
}

TEST(Input, SoftmaxReadsXAndChecksRowsAndCols) {
  const fa::StepInfo s{"98_s", "s", fa::Family::Softmax};
  const std::string f = kData + "/sm_cols_31.x.npy";
  const Resolved r = resolve(s, {"--input", f.c_str(), "--cols", "31"});
  ASSERT_EQ(r.error, "");
  EXPECT_EQ(r.p.describe(), "6x31");
  ASSERT_EQ(r.o.inputs.size(), 1u);
  EXPECT_EQ(r.o.inputs[0].size(), 6u * 31);
  EXPECT_TRUE(contains(resolve(s, {"--input", f.c_str(), "--rows", "5"}).error, "--rows 5 does not match"));
}

// ---- step_main: argument errors come before any device work (exit 2 without a GPU) -----------
int run_step(const fa::StepInfo& s, std::vector<const char*> args, std::string* err) {
  args.insert(args.begin(), s.name);
  testing::internal::CaptureStderr();
  testing::internal::CaptureStdout();
  const int rc = fa::step_main(int(args.size()), const_cast<char**>(args.data()), s, nullptr);
  *err = testing::internal::GetCapturedStderr();
  testing::internal::GetCapturedStdout();
  return rc;
}

TEST(StepMain, SweepConflictsWithShapeFlagsButNotDtypeOrBwd) {
  const fa::StepInfo s = attention_step({fa::DType::F32, fa::DType::F16}, true);
  std::string err;
  EXPECT_EQ(run_step(s, {"--sweep", "--seq", "64"}, &err), fa::kExitUsage);
  EXPECT_TRUE(contains(err, "--sweep conflicts with --seq (--sweep runs the attention benchmark shapes")) << err;
  EXPECT_TRUE(contains(err, "; of the shape flags it takes only --kv-heads, --bwd, --dtype, --inputs)")) << err;
  EXPECT_EQ(run_step(attention_step({fa::DType::F32}, false), {"--causal", "--sweep"}, &err), fa::kExitUsage);
  EXPECT_TRUE(contains(err,
                       "--sweep conflicts with --causal (--sweep runs the attention benchmark shapes; of the "
                       "shape flags it takes only --kv-heads, --dtype, --inputs)"))
      << err;
  EXPECT_EQ(run_step(s, {"--input", "x", "--sweep"}, &err), fa::kExitUsage);
  EXPECT_TRUE(contains(err, "--sweep conflicts with --input")) << err;
  // --sweep --kv-heads N (the sweep's shapes with N K/V heads) is past the parser too.
  EXPECT_EQ(run_step(s, {"--sweep", "--kv-heads", "8"}, &err), fa::kExitUsage);
  EXPECT_FALSE(contains(err, "conflicts")) << err;
  // --dtype and --bwd pick the sweep's variant, --inputs its inputs: past the parser (the stand-in has no forward).
  EXPECT_EQ(run_step(s, {"--sweep", "--dtype", "f16", "--bwd", "--inputs", "randn"}, &err), fa::kExitUsage);
  EXPECT_TRUE(contains(err, "has no attention forward")) << err;
  const fa::StepInfo m{"97_m", "m", fa::Family::Matmul};
  EXPECT_EQ(run_step(m, {"--sweep", "--layout", "nt"}, &err), fa::kExitUsage);
  EXPECT_TRUE(contains(err, "--sweep conflicts with --layout (--sweep runs the matmul benchmark shapes)")) << err;
}

// A --sweep whose every shape the step refuses says so first, with the reason, instead of a skip line
// per shape and then the error.
TEST(StepMain, SweepWithEveryShapeRefusedPrintsTheErrorFirst) {
  fa::StepInfo s = attention_step({fa::DType::F32}, false);  // no GQA
  s.attn_fwd = [](const fa::AttnFwdArgs&, cudaStream_t) {};      // never launched: no device
  std::string err;
  EXPECT_EQ(run_step(s, {"--sweep", "--kv-heads", "8"}, &err), fa::kExitUsage);
  EXPECT_EQ(err.rfind("error: 99_stand_in supports none of the --sweep problems (24): ", 0), 0u) << err;
  EXPECT_TRUE(contains(err, "grouped-query attention")) << err;
  EXPECT_FALSE(contains(err, "skip ")) << err;
  // Some refused, some not: each refused one is still named (then the missing device, exit 3).
  fa::StepInfo d96 = s;
  d96.attn_rule.max_head_dim = 96;
  EXPECT_EQ(run_step(d96, {"--sweep"}, &err), fa::kExitNoDevice);
  EXPECT_TRUE(contains(err, "skip B32 H16 S512 D128 f32: ")) << err;
}

TEST(StepMain, CommonConflicts) {
  const fa::StepInfo s{"98_s", "s", fa::Family::Softmax};
  std::string err;
  EXPECT_EQ(run_step(s, {"--json", "--csv"}, &err), fa::kExitUsage);
  EXPECT_TRUE(contains(err, "--csv conflicts with --json")) << err;
  EXPECT_EQ(run_step(s, {"--sweep", "--profile"}, &err), fa::kExitUsage);
  EXPECT_TRUE(contains(err, "--profile conflicts with --sweep (--profile runs alone)")) << err;
  EXPECT_EQ(run_step(s, {"--input", "/nonexistent/x.npy"}, &err), fa::kExitUsage);
  EXPECT_TRUE(contains(err, "cannot open '/nonexistent/x.npy'")) << err;
}

// ---- run_all --steps --------------------------------------------------------------------------
TEST(RunAll, StepsSelectsByNumberOrNameAndNamesAnUnknownOne) {
  const fa::StepInfo a{"01_first", "", fa::Family::Softmax}, b{"02_second", "", fa::Family::Softmax},
      c{"10_tenth", "", fa::Family::Matmul};
  const std::vector<const fa::StepInfo*> steps{&a, &b, &c};
  EXPECT_EQ(fa::select_steps("01,10", steps), (std::vector<bool>{true, false, true}));
  EXPECT_EQ(fa::select_steps("2,10_tenth", steps), (std::vector<bool>{false, true, true}));
  try {
    fa::select_steps("01,99", steps);
    ADD_FAILURE() << "no error for 99";
  } catch (const fa::UsageError& e) {
    EXPECT_EQ(std::string(e.what()), "--steps: no built step '99' (built: 01_first, 02_second, 10_tenth)");
  }
  EXPECT_THROW(fa::select_steps("01,,02", steps), fa::UsageError);
  EXPECT_THROW(fa::select_steps("01_firs", steps), fa::UsageError);
}

// A step named twice, by number or name, is an error naming it (it would run once).
TEST(RunAll, StepsNamesARepeatedStep) {
  const fa::StepInfo a{"01_first", "", fa::Family::Softmax}, b{"02_second", "", fa::Family::Softmax};
  const std::vector<const fa::StepInfo*> steps{&a, &b};
  for (const char* list : {"01,01", "01,02,1", "01_first,01", "02,01_first,01_first"}) {
    try {
      fa::select_steps(list, steps);
      ADD_FAILURE() << "no error for " << list;
    } catch (const fa::UsageError& e) {
      EXPECT_EQ(std::string(e.what()), std::string("--steps '") + list + "': 01_first is named twice") << list;
    }
  }
}

// ---- the results table ------------------------------------------------------------------------
// The column (in characters) where `cell` starts on `line`.
std::size_t column_of(const std::string& line, const std::string& cell) {
  const std::size_t at = line.find(cell);
  EXPECT_NE(at, std::string::npos) << cell << " in " << line;
  std::size_t n = 0;
  for (std::size_t i = 0; i < at; ++i) n += (static_cast<unsigned char>(line[i]) & 0xC0) != 0x80;
  return n;
}

TEST(Table, ColumnsStayAlignedForAnyStepName) {
  std::vector<fa::ResultRow> rows(3);
  rows[0].step = "01_a", rows[0].problem = "16x16", rows[0].time_ms = 1.5, rows[0].check = "PASS";
  rows[0].idea = "short";
  rows[1].step = "42_a_very_long_step_name_that_is_longer_than_any_real_one";
  rows[1].problem = "B1 H2 Sq33 Sk70 D64 causal bf16 fwd+bwd", rows[1].time_ms = 12345.25;
  rows[1].rate = 3.5, rows[1].unit = "TFLOP/s", rows[1].pct_peak = 12.5, rows[1].peak_name = "fp32";
  rows[1].check = "FAIL", rows[1].idea = "A·Bᵀ";
  rows[2].step = "03_b", rows[2].problem = "4096x4096x4096 NN", rows[2].speedup_vs_prev = 1.25;
  rows[2].idea = "last idea";
  const std::string table = fa::format_table(rows);
  std::vector<std::string> lines;
  for (std::size_t b = 0, e; (e = table.find('\n', b)) != std::string::npos; b = e + 1)
    if (e > b) lines.push_back(table.substr(b, e - b));
  ASSERT_EQ(lines.size(), 4u) << table;
  const std::size_t problem = column_of(lines[0], "problem"), idea = column_of(lines[0], "idea");
  EXPECT_EQ(column_of(lines[1], "16x16"), problem);
  EXPECT_EQ(column_of(lines[2], "B1 H2"), problem);
  EXPECT_EQ(column_of(lines[3], "4096x"), problem);
  EXPECT_EQ(column_of(lines[1], "short"), idea);
  EXPECT_EQ(column_of(lines[2], "A·Bᵀ"), idea);
  EXPECT_EQ(column_of(lines[3], "last idea"), idea);
  // Numbers are right-aligned: the time column ends in the same place on every line.
  const std::size_t time_end = column_of(lines[0], "time (ms)") + 9;
  EXPECT_EQ(column_of(lines[1], "1.5000") + 6, time_end);
  EXPECT_EQ(column_of(lines[2], "12345.2500") + 10, time_end);
}

}  // namespace
