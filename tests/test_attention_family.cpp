// CPU tests of the attention family's problem handling (harness/family_attention.cpp), with
// stand-in steps (no kernels are launched): --dtype defaults to the step's default problem's,
// --sweep sweeps a 16-bit step in f16 then bf16, and an fp32-only previous step runs the fp32
// version of a 16-bit problem.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "cli.h"
#include "launch.h"
#include "runner.h"

namespace {
using fa::DType;

fa::Problem f16_default() {
  fa::Problem p = fa::kAttentionFamily.default_problem();
  p.attn.dtype = DType::F16;
  return p;
}
std::string lowp_only(const fa::Problem& p) { return p.attn.dtype == DType::F32 ? "fp16/bf16 only" : ""; }
std::string f16_only(const fa::Problem& p) { return p.attn.dtype == DType::F16 ? "" : "f16 only"; }
std::string fp32_only(const fa::Problem& p) { return p.attn.dtype == DType::F32 ? "" : "fp32 only"; }

fa::StepInfo step(std::string (*supports)(const fa::Problem&), fa::Problem (*def)()) {
  fa::StepInfo s{"99_stand_in", "a stand-in step", fa::Family::Attention};
  s.attn_rule.dtypes = {DType::F32, DType::F16, DType::BF16};  // `supports` alone decides
  s.supports = supports;
  s.default_problem = def;
  s.attn_bwd = [](const fa::AttnBwdArgs&, cudaStream_t) {};  // offers --bwd (never launched)
  return s;
}

// The problem a step's executable runs for these flags, and its --sweep.
struct Parsed {
  fa::Problem p;
  std::vector<fa::Problem> sweep;
  std::vector<int> seq_lens;  // --cache-lens
  bool randn = false;         // --inputs randn
};
Parsed parse(const fa::StepInfo& s, std::vector<const char*> args) {
  fa::ArgParser parser("prog", "test");
  Parsed out{fa::default_problem(s), {}};
  fa::kAttentionFamily.add_shape_flags(parser, s, out.p);
  args.insert(args.begin(), "prog");
  EXPECT_TRUE(parser.parse(int(args.size()), args.data()));
  fa::RunOptions o;
  fa::kAttentionFamily.resolve(parser, out.p, o);
  out.sweep = fa::kAttentionFamily.sweep(s);
  out.seq_lens = o.seq_lens;
  out.randn = o.randn;
  return out;
}

std::vector<DType> types(const std::vector<fa::Problem>& ps) {
  std::vector<DType> t;
  for (const auto& p : ps) t.push_back(p.attn.dtype);
  return t;
}

TEST(AttentionFamily, DtypeDefaultsToTheStepsDefaultProblem) {
  const fa::StepInfo lowp = step(lowp_only, f16_default), fp32 = step(fp32_only, nullptr);
  EXPECT_EQ(parse(lowp, {}).p.attn.dtype, DType::F16);
  EXPECT_EQ(parse(lowp, {"--dtype", "bf16"}).p.attn.dtype, DType::BF16);
  EXPECT_EQ(parse(fp32, {}).p.attn.dtype, DType::F32);
  EXPECT_EQ(parse(fp32, {"--dtype", "f16"}).p.attn.dtype, DType::F16);
  EXPECT_EQ(parse(lowp, {"--seq", "100"}).p.describe(), "B8 H32 S100 D64 f16");
}

TEST(AttentionFamily, SweepOfALowpStepRunsBothTypesF16First) {
  const std::vector<fa::Problem> sw = parse(step(lowp_only, f16_default), {}).sweep;
  ASSERT_EQ(sw.size(), 48u);  // 2 types x {causal, not} x {64, 128} x 6 lengths
  for (std::size_t i = 0; i < sw.size(); ++i) EXPECT_EQ(sw[i].attn.dtype, i < 24 ? DType::F16 : DType::BF16) << i;
  EXPECT_EQ(sw[0].describe(), "B32 H32 S512 D64 f16");
  EXPECT_EQ(sw[24].describe(), "B32 H32 S512 D64 bf16");
  EXPECT_EQ(sw[47].describe(), "B1 H16 S16384 D128 causal bf16");
}

TEST(AttentionFamily, SweepFollowsAnExplicitDtypeOrTheOneTypeSupported) {
  EXPECT_EQ(types(parse(step(lowp_only, f16_default), {"--dtype", "bf16"}).sweep), std::vector<DType>(24, DType::BF16));
  EXPECT_EQ(types(parse(step(f16_only, f16_default), {}).sweep), std::vector<DType>(24, DType::F16));
  EXPECT_EQ(types(parse(step(fp32_only, nullptr), {}).sweep), std::vector<DType>(24, DType::F32));
  EXPECT_EQ(types(parse(step(fp32_only, nullptr), {"--dtype", "f16"}).sweep), std::vector<DType>(24, DType::F16));
  const auto bwd = parse(step(fp32_only, nullptr), {"--bwd"}).sweep;
  EXPECT_TRUE(bwd.front().backward && bwd.back().backward);
}

// --inputs randn reaches RunOptions (the --sweep's problems too: their inputs are drawn from it), and
// leaves the problems themselves as they are.
TEST(AttentionFamily, InputsRandnIsARunOptionAndTheSweepKeepsItsShapes) {
  const fa::StepInfo lowp = step(lowp_only, f16_default);
  EXPECT_FALSE(parse(lowp, {}).randn);
  const Parsed randn = parse(lowp, {"--inputs", "randn", "--bwd"});
  EXPECT_TRUE(randn.randn);
  const Parsed plain = parse(lowp, {"--bwd"});
  ASSERT_EQ(randn.sweep.size(), plain.sweep.size());
  for (std::size_t i = 0; i < randn.sweep.size(); ++i) EXPECT_EQ(randn.sweep[i].describe(), plain.sweep[i].describe());
}

TEST(AttentionFamily, Fp32PreviousStepRunsTheFp32Problem) {
  const fa::StepInfo fp32 = step(fp32_only, nullptr), lowp = step(lowp_only, f16_default),
                     f16 = step(f16_only, f16_default);
  fa::Problem p = f16_default();
  p.attn.seq_q = 77;
  const fa::Problem q = fa::kAttentionFamily.prev_problem(fp32, p);
  EXPECT_EQ(q.attn.dtype, DType::F32);
  EXPECT_EQ(q.attn.seq_q, 77);
  EXPECT_EQ(fa::kAttentionFamily.prev_problem(lowp, p).attn.dtype, DType::F16);  // runs the same type
  p.attn.dtype = DType::BF16;
  EXPECT_EQ(fa::kAttentionFamily.prev_problem(f16, p).attn.dtype, DType::BF16);  // neither: unchanged
  p.attn.dtype = DType::F32;
  EXPECT_EQ(fa::kAttentionFamily.prev_problem(fp32, p).attn.dtype, DType::F32);
}

TEST(AttentionFamily, VariantSelectsANamedAlternativeAndThePreviousStepRunsItsDefault) {
  fa::StepInfo two = step(lowp_only, f16_default);
  two.variants = {"atomic", "deterministic"};
  EXPECT_EQ(parse(two, {}).p.attn.variant, 0);
  const Parsed det = parse(two, {"--variant", "deterministic", "--seq", "100"});
  EXPECT_EQ(det.p.attn.variant, 1);
  EXPECT_EQ(fa::kAttentionFamily.prev_problem(step(lowp_only, f16_default), det.p).attn.variant, 0);
  const Parsed sw = parse(two, {"--variant", "deterministic"});  // its --sweep keeps the variant
  for (const fa::Problem& p : sw.sweep) EXPECT_EQ(p.attn.variant, 1);
  fa::ArgParser parser("prog", "test");
  fa::Problem p = fa::default_problem(two);
  fa::kAttentionFamily.add_shape_flags(parser, two, p);
  const char* bad[] = {"prog", "--variant", "fast"};
  EXPECT_THROW(parser.parse(3, bad), fa::UsageError);  // not one of the step's variants
  EXPECT_NE(parser.help().find("--variant"), std::string::npos);
  fa::ArgParser plain("prog", "test");
  fa::Problem q = fa::default_problem(step(lowp_only, f16_default));
  fa::kAttentionFamily.add_shape_flags(plain, step(lowp_only, f16_default), q);
  EXPECT_EQ(plain.help().find("--variant"), std::string::npos);  // a step without variants has no flag
}

// --kv-heads (grouped-query attention) reaches AttnParams; the problem's name says "KV<n>" only when
// it differs from the query heads; a step whose rule does not allow GQA refuses it with a reason,
// a step that does runs it; query heads that are not a multiple of the K/V heads are refused by both.
TEST(AttentionFamily, KvHeadsAreParsedNamedAndRefusedWithoutGqa) {
  const fa::StepInfo mha = step(lowp_only, f16_default);
  fa::StepInfo gqa = mha;
  gqa.attn_rule.gqa = true;
  const Parsed plain = parse(mha, {"--heads", "8", "--seq", "64"});
  EXPECT_EQ(fa::kv_heads_of(plain.p.attn), 8);
  EXPECT_EQ(plain.p.describe(), "B8 H8 S64 D64 f16");
  EXPECT_EQ(fa::step_supports(mha, plain.p), "");
  const Parsed grouped = parse(mha, {"--heads", "8", "--kv-heads", "2", "--seq", "64"});
  EXPECT_EQ(grouped.p.attn.kv_heads, 2);
  EXPECT_EQ(grouped.p.describe(), "B8 H8 KV2 S64 D64 f16");
  EXPECT_NE(fa::step_supports(mha, grouped.p).find("no grouped-query attention"), std::string::npos);
  EXPECT_EQ(fa::step_supports(gqa, grouped.p), "");
  const Parsed same = parse(mha, {"--heads", "8", "--kv-heads", "8", "--seq", "64"});  // = heads: MHA
  EXPECT_EQ(same.p.describe(), "B8 H8 S64 D64 f16");
  EXPECT_EQ(fa::step_supports(mha, same.p), "");
  for (const char* kvh : {"3", "16"}) {
    const Parsed bad = parse(gqa, {"--heads", "8", "--kv-heads", kvh, "--seq", "64"});
    EXPECT_NE(fa::step_supports(gqa, bad.p).find("must be a multiple of the K/V heads"), std::string::npos) << kvh;
    EXPECT_NE(fa::step_supports(mha, bad.p).find("must be a multiple of the K/V heads"), std::string::npos) << kvh;
  }
}

// --cache-lens (a KV cache): one length per sequence or one for all, the capacity the longest
// unless --seq-k gives it; the problem's name says "cache"; a step without a KV cache refuses it;
// a length that is negative, above the capacity, or (causal) below seq_q, a wrong count and a
// non-integer are refused with a message that names the sequence.
TEST(AttentionFamily, CacheLengthsAreParsedCheckedAndRefusedWithoutAKvCache) {
  const fa::StepInfo plain = step(lowp_only, f16_default);
  fa::StepInfo cache = plain;
  cache.attn_rule.kv_cache = true;
  const Parsed three = parse(cache, {"--batch", "3", "--heads", "4", "--seq-q", "1", "--cache-lens", "5,0,300"});
  EXPECT_TRUE(three.p.attn.kv_cache);
  EXPECT_EQ(three.seq_lens, (std::vector<int>{5, 0, 300}));
  EXPECT_EQ(three.p.attn.seq_k, 300);
  EXPECT_EQ(three.p.describe(), "B3 H4 Sq1 Sk300 D64 cache f16");
  EXPECT_EQ(fa::step_supports(cache, three.p), "");
  EXPECT_NE(fa::step_supports(plain, three.p).find("runs no KV cache"), std::string::npos);
  const Parsed all = parse(cache, {"--batch", "2", "--seq-q", "2", "--seq-k", "512", "--cache-lens", "100", "--causal"});
  EXPECT_EQ(all.seq_lens, (std::vector<int>{100, 100}));
  EXPECT_EQ(all.p.attn.seq_k, 512);
  EXPECT_EQ(all.p.describe(), "B2 H32 Sq2 Sk512 D64 cache causal f16");
  auto refusal = [&](std::vector<const char*> args) {
    try {
      parse(cache, args);
    } catch (const fa::UsageError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_NE(refusal({"--batch", "2", "--cache-lens", "5,-1"}).find("sequence 1's length -1 is negative"),
            std::string::npos);
  // Every refusal of the lengths names the flag and what it was given, as its parse errors do.
  EXPECT_EQ(refusal({"--batch", "2", "--cache-lens", "5,-1"}), "--cache-lens 5,-1: sequence 1's length -1 is negative");
  EXPECT_EQ(refusal({"--batch", "1", "--seq-k", "64", "--cache-lens", "65"}).rfind("--cache-lens 65: sequence 0's", 0), 0u)
      << refusal({"--batch", "1", "--seq-k", "64", "--cache-lens", "65"});
  EXPECT_EQ(refusal({"--batch", "3", "--cache-lens", "1,2"}).rfind("--cache-lens 1,2: a KV cache needs", 0), 0u)
      << refusal({"--batch", "3", "--cache-lens", "1,2"});
  EXPECT_NE(refusal({"--batch", "1", "--seq-k", "64", "--cache-lens", "65"}).find("above the cache capacity"),
            std::string::npos);
  EXPECT_NE(refusal({"--batch", "1", "--seq-q", "4", "--causal", "--cache-lens", "3"}).find("below seq_q 4"),
            std::string::npos);
  EXPECT_NE(refusal({"--batch", "3", "--cache-lens", "1,2"}).find("2 lengths for batch 3"), std::string::npos);
  EXPECT_NE(refusal({"--batch", "2", "--cache-lens", "1,x"}).find("'x' is not an integer"), std::string::npos);
  // A number too large for a length is out of range, not "not an integer".
  EXPECT_NE(refusal({"--batch", "2", "--cache-lens", "1,99999999999"}).find("'99999999999' is out of range"),
            std::string::npos)
      << refusal({"--batch", "2", "--cache-lens", "1,99999999999"});
  EXPECT_NE(refusal({"--batch", "1", "--cache-lens", "-99999999999999999999"}).find("is out of range"), std::string::npos);
}

// A step without a KV cache refuses --cache-lens itself, first, naming it: not a later complaint
// about the lengths or the shape that the flag would not have changed anyway.
TEST(AttentionFamily, CacheLensIsRefusedFirstByAStepWithoutACache) {
  const fa::StepInfo plain = step(lowp_only, f16_default);
  for (std::vector<const char*> args : {std::vector<const char*>{"--cache-lens", "5"},
                                        {"--batch", "3", "--cache-lens", "1,2"},
                                        {"--cache-lens", "x", "--seq", "64"}}) {
    fa::ArgParser parser("prog", "test");
    fa::Problem p = fa::default_problem(plain);
    fa::kAttentionFamily.add_shape_flags(parser, plain, p);
    args.insert(args.begin(), "prog");
    std::string error = "accepted";
    try {
      parser.parse(int(args.size()), args.data());
      fa::RunOptions o;
      fa::kAttentionFamily.resolve(parser, p, o);
    } catch (const fa::UsageError& e) {
      error = e.what();
    }
    EXPECT_EQ(error.rfind("--cache-lens: 99_stand_in has no KV cache", 0), 0u) << error;
  }
}

// A step whose default problem is grouped (a decode step: 32 query heads over 8 K/V heads, a KV cache)
// and whose --sweep has its own shapes, in f16 only: --help tells those defaults, not the generic
// ones; --heads alone runs MHA and says so.
fa::Problem decode_default() {
  fa::Problem p = f16_default();
  p.attn.batch = 8, p.attn.heads = 32, p.attn.kv_heads = 8, p.attn.seq_q = 1, p.attn.seq_k = 4096;
  p.attn.head_dim = 128, p.attn.kv_cache = true;
  return p;
}
std::vector<fa::Problem> decode_sweep() { return {decode_default()}; }

TEST(AttentionFamily, HelpOfADecodeStepTellsItsRealDefaults) {
  fa::StepInfo s = step(lowp_only, decode_default);
  s.attn_rule.dtypes = {DType::F16, DType::BF16};
  s.attn_rule.gqa = s.attn_rule.kv_cache = true;
  s.sweep = decode_sweep;
  fa::ArgParser parser(s.name, s.idea);
  fa::Problem p = fa::default_problem(s);
  fa::kAttentionFamily.add_shape_flags(parser, s, p);
  const std::string help = parser.help();
  EXPECT_NE(help.find("default 8, of the default 32 heads"), std::string::npos) << help;
  EXPECT_NE(help.find("--heads alone, without --kv-heads, runs MHA"), std::string::npos) << help;
  EXPECT_NE(help.find("(default f16; --sweep: f16)"), std::string::npos) << help;
  EXPECT_EQ(help.find("f16 and bf16"), std::string::npos) << help;
  EXPECT_NE(help.find("with a KV cache (this step's default), each sequence's last query sees its last key"),
            std::string::npos)
      << help;
  // The generic step keeps the generic words.
  const std::string plain = [] {
    const fa::StepInfo g = step(lowp_only, f16_default);
    fa::ArgParser parser(g.name, g.idea);
    fa::Problem p = fa::default_problem(g);
    fa::kAttentionFamily.add_shape_flags(parser, g, p);
    return parser.help();
  }();
  EXPECT_NE(plain.find("default H)"), std::string::npos) << plain;
  EXPECT_EQ(plain.find("runs MHA"), std::string::npos) << plain;
}

TEST(AttentionFamily, HeadsAloneOnAGroupedDefaultRunsMhaAndSaysSo) {
  fa::StepInfo s = step(lowp_only, decode_default);
  s.attn_rule.gqa = s.attn_rule.kv_cache = true;
  testing::internal::CaptureStdout();
  const Parsed mha = parse(s, {"--heads", "16"});
  const std::string out = testing::internal::GetCapturedStdout();
  EXPECT_EQ(fa::kv_heads_of(mha.p.attn), 16);
  EXPECT_NE(out.find("note: --heads 16 without --kv-heads runs MHA (16 K/V heads; the default problem has 8 K/V "
                     "heads for 32 heads)"),
            std::string::npos)
      << out;
  testing::internal::CaptureStdout();
  const Parsed gqa = parse(s, {"--heads", "16", "--kv-heads", "4"});
  EXPECT_EQ(testing::internal::GetCapturedStdout().find("note:"), std::string::npos);
  EXPECT_EQ(fa::kv_heads_of(gqa.p.attn), 4);
}

// A step whose default problem runs the backward (the mma.sync backward steps) can run the forward
// alone (--fwd-only), and --input then asks for Q, K, V only; dO only when the backward runs.
fa::Problem f16_fwd_bwd() {
  fa::Problem p = f16_default();
  p.backward = true;
  return p;
}

TEST(AttentionFamily, ABackwardStepRunsTheForwardAloneAndReadsDoOnlyForTheBackward) {
  const fa::StepInfo s = step(lowp_only, f16_fwd_bwd);
  fa::ArgParser parser(s.name, s.idea);
  fa::Problem p = fa::default_problem(s);
  fa::kAttentionFamily.add_shape_flags(parser, s, p);
  const std::string help = parser.help();
  EXPECT_NE(help.find("--fwd-only"), std::string::npos) << help;
  EXPECT_NE(help.find("(and dO unless --fwd-only)"), std::string::npos) << help;
  EXPECT_TRUE(parse(s, {}).p.backward);  // the default: fwd + bwd
  const Parsed fwd = parse(s, {"--fwd-only", "--seq", "64"});
  EXPECT_FALSE(fwd.p.backward);
  EXPECT_EQ(fwd.p.describe(), "B8 H32 S64 D64 f16");
  const Parsed sweep = parse(s, {"--fwd-only"});  // parse() also asks for the sweep
  ASSERT_FALSE(sweep.sweep.empty());
  for (const fa::Problem& q : sweep.sweep) EXPECT_FALSE(q.backward) << q.describe();
  // --input: Q, K, V only for the forward alone; dO (missing here) when the backward runs.
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / "fa_test_fwd_only";
  fs::create_directories(dir);
  for (const char* t : {"q", "k", "v"})
    fs::copy_file(fs::path(FA_DATA_DIR) / (std::string("at_q100_k100_d128_b1h2.") + t + ".npy"),
                  dir / (std::string("x.") + t + ".npy"), fs::copy_options::overwrite_existing);
  const std::string prefix = (dir / "x").string();
  auto error_of = [&](std::vector<const char*> args) {
    fa::ArgParser parser(s.name, s.idea);
    fa::Problem p = fa::default_problem(s);
    fa::kAttentionFamily.add_shape_flags(parser, s, p);
    args.insert(args.begin(), "prog");
    try {
      parser.parse(int(args.size()), args.data());
      fa::RunOptions o;
      fa::kAttentionFamily.resolve(parser, p, o);
      return std::string(o.inputs.size() == 3 ? "read q, k, v" : "read " + std::to_string(o.inputs.size()));
    } catch (const fa::UsageError& e) {
      return std::string(e.what());
    }
  };
  EXPECT_EQ(error_of({"--fwd-only", "--input", prefix.c_str()}), "read q, k, v");
  EXPECT_NE(error_of({"--input", prefix.c_str()}).find("x.dout.npy"), std::string::npos);
  EXPECT_EQ(error_of({"--fwd-only", "--bwd"}), "--bwd conflicts with --fwd-only (--fwd-only runs the forward alone)");
  fs::remove_all(dir);
  // A forward-and-backward step whose default is the forward alone has no --fwd-only.
  fa::StepInfo fwd_default = step(lowp_only, f16_default);
  fa::ArgParser plain(fwd_default.name, fwd_default.idea);
  fa::Problem q = fa::default_problem(fwd_default);
  fa::kAttentionFamily.add_shape_flags(plain, fwd_default, q);
  EXPECT_EQ(plain.help().find("--fwd-only"), std::string::npos);
}

}  // namespace
