// The attention family (steps 04+): inputs, checks (O, LSE; dQ, dK, dV with --bwd) and timing
// of the forward, the backward and both, with the FlashAttention FLOP convention.
//
// fp32 steps (04-08) and fp16/bf16 steps (09+) alike: inputs are drawn in fp32 and rounded to
// the problem's element type on the host (attention_inputs.h), and every reference and every
// fp32 previous step sees the float copies of the rounded values. A 16-bit step is checked with
// the per-row rule of tolerance.h (fp64 reference and ref_lowp on sampled query rows of O and
// dQ, key rows of dK and dV); a previous step that runs only fp32 runs the fp32 version of the
// problem on the same (rounded) inputs.
//
// run() reads top to bottom: Runs sets up the step and the previous step on the same inputs;
// check() runs each once and compares (check_fp32, or check_lowp and check_lowp_bwd);
// time_runs() times them interleaved, one make_row() per timed quantity.
#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>
#include <memory>
#include <tuple>

#include "attention_inputs.h"
#include "attention_reference.h"
#include "buffer.h"
#include "check.h"
#include "cli.h"
#include "launch.h"
#include "lowp.h"
#include "npy.h"
#include "random.h"
#include "reference.h"
#include "runner.h"

namespace fa {
namespace {
using namespace attention;

// CPU budget of the references in --check. fp32: heads are checked while the multiply-adds of
// the checked heads stay under this; beyond it, the previous step is the only comparison.
// fp16/bf16: query rows sampled over every head (the fp64 reference and ref_lowp of each), as
// many as the budget allows, so every problem is checked against fp64; with --bwd, the same
// budget again for the rows of dQ and again for those of dK and dV (check_lowp_bwd).
constexpr double kRefMacs = double(1ll << 31);

struct Flags {
  long long batch = 8, heads = 32, kv_heads = 0, seq = 0, seq_q = 2048, seq_k = 2048, head_dim = 64;
  double scale = 0;
  bool causal = false, bwd = false, fwd_only = false;
  std::string dtype;  // "" (not given): the step's default problem's
  std::string input;    // --input PREFIX
  std::string cache_lens;  // --cache-lens L[,L...]
  long long page_size = 0;  // --page-size P: a paged KV cache
  std::string inputs;      // --inputs uniform|randn ("" not given: uniform)
  bool kv_heads_given = false;  // --kv-heads on the command line (resolve)
  std::string variant;               // "" (not given): the step's first
  std::vector<std::string> variants;  // the step's (add_flags)
} flags;

DType parse_dtype(const std::string& s) { return s == "f32" ? DType::F32 : s == "f16" ? DType::F16 : DType::BF16; }

Problem make(int batch, int heads, int seq_q, int seq_k, int d, bool causal, DType dt = DType::F32) {
  Problem p;
  p.family = Family::Attention;
  p.attn.batch = batch, p.attn.heads = heads, p.attn.seq_q = seq_q, p.attn.seq_k = seq_k, p.attn.head_dim = d;
  p.attn.scale = float(1.0 / std::sqrt(double(d)));
  p.attn.causal = causal;
  p.attn.dtype = dt;
  return p;
}

Problem default_problem() { return fa2_problem(2048, 64, false, DType::F32); }

// The element types of --sweep: --dtype if given; else the step's default problem's, and for a
// 16-bit step that supports both, f16 then bf16.
std::vector<DType> sweep_types(const StepInfo& step) {
  if (!flags.dtype.empty()) return {parse_dtype(flags.dtype)};
  Problem p = fa::default_problem(step);
  if (!is_lowp(p.attn.dtype)) return {p.attn.dtype};
  for (DType t : {DType::F16, DType::BF16}) {
    p.attn.dtype = t;
    if (!step_supports(step, p).empty()) return {fa::default_problem(step).attn.dtype};
  }
  return {DType::F16, DType::BF16};
}

// The index of --variant among the step's variants (0, its default, when not given).
int variant_index() {
  for (std::size_t i = 0; i < flags.variants.size(); ++i)
    if (flags.variants[i] == flags.variant) return int(i);
  return 0;
}

std::vector<Problem> sweep(const StepInfo& step) {
  std::vector<Problem> out;
  if (step.sweep) {  // the step's own benchmark shapes (decoding: step 22), in their own type unless --dtype
    if (flags.kv_heads_given)
      throw UsageError(std::string(step.name) + "'s --sweep names its own K/V heads: drop --kv-heads");
    for (Problem p : step.sweep()) {
      if (!flags.dtype.empty()) p.attn.dtype = parse_dtype(flags.dtype);
      p.attn.variant = variant_index();
      out.push_back(p);
    }
    return out;
  }
  for (DType t : sweep_types(step))
    for (bool causal : {false, true})
      for (int d : {64, 128})
        for (int seq : {512, 1024, 2048, 4096, 8192, 16384}) {
          out.push_back(fa2_problem(seq, d, causal, t));
          out.back().backward = flags.bwd;  // --sweep --bwd: the backward too
          // --sweep --kv-heads N: the same shapes with N K/V heads (GQA; N equal to the heads: MHA)
          if (flags.kv_heads > 0 && flags.kv_heads != out.back().attn.heads)
            out.back().attn.kv_heads = int(flags.kv_heads);
          out.back().attn.variant = variant_index();
        }
  return out;
}

void add_flags(ArgParser& parser, const StepInfo& step, Problem& p) {
  flags = Flags{};
  flags.variants = step.variants;
  flags.batch = p.attn.batch, flags.heads = p.attn.heads, flags.seq_q = p.attn.seq_q, flags.seq_k = p.attn.seq_k;
  flags.kv_heads = p.attn.kv_heads, flags.page_size = p.attn.page_size;
  flags.head_dim = p.attn.head_dim, flags.causal = p.attn.causal, flags.bwd = p.backward;
  // A step whose default problem is grouped (the decode step: 8 K/V heads for 32) says so.
  const bool grouped = p.attn.kv_heads > 0 && p.attn.kv_heads != p.attn.heads;
  parser.add_int("--batch", &flags.batch, 1, 1 << 20, "batch size B");
  parser.add_int("--heads", &flags.heads, 1, 1 << 20,
                 std::string("heads H") +
                     (grouped ? "; --heads alone, without --kv-heads, runs MHA: as many K/V heads as H" : ""));
  parser.add_int("--kv-heads", &flags.kv_heads, 1, 1 << 20,
                 "K/V heads (grouped-query attention; H a multiple of it; default " +
                     (grouped ? std::to_string(p.attn.kv_heads) + ", of the default " + std::to_string(p.attn.heads) +
                                    " heads"
                              : std::string("H")) +
                     ")" + (step.attn_rule.gqa ? "" : ": this step runs only the default") +
                     (step.sweep ? "; its --sweep has its own K/V heads" : ""));
  parser.add_int("--seq", &flags.seq, 1, INT_MAX, "sequence length: sets --seq-q and --seq-k");
  parser.add_int("--seq-q", &flags.seq_q, 1, INT_MAX, "query length");
  parser.add_int("--seq-k", &flags.seq_k, 1, INT_MAX, "key/value length");
  const AttnRule& rule = step.attn_rule;
  parser.add_int(
      "--head-dim", &flags.head_dim, 1, 1024,
      "head dimension d (this step: " +
          (rule.head_dim_multiple > 1 ? "a multiple of " + std::to_string(rule.head_dim_multiple) + ", " : "") +
          "at most " + std::to_string(rule.max_head_dim) + ")");
  parser.add_double("--scale", &flags.scale, 1e-6, 1e6, "softmax scale (default 1/sqrt(head_dim))");
  parser.add_flag("--causal", &flags.causal,
                  std::string("mask: query i sees keys j <= i (top-left aligned)") +
                      (step.attn_rule.kv_cache
                           ? std::string("; with a KV cache") + (p.attn.kv_cache ? " (this step's default)" : "") +
                                 ", each sequence's last query sees its last key: j <= len - seq_q + i"
                           : ""));
  // A step whose default problem runs the backward (the mma.sync backward steps): --bwd is that
  // default, and --fwd-only runs the forward alone.
  const bool bwd_default = step.attn_bwd && p.backward;
  if (step.attn_bwd)
    parser.add_flag("--bwd", &flags.bwd,
                    std::string("also check and time the backward (fwd, bwd, fwd+bwd)") +
                        (bwd_default ? "; this step's default (--fwd-only: the forward alone)" : ""));
  else
    parser.refuse("--bwd", std::string(step.name) + " has no backward pass");
  if (bwd_default) parser.add_flag("--fwd-only", &flags.fwd_only, "the forward alone: no backward, no dO");
  // --dtype offers the element types the step runs (attn_rule.dtypes).
  std::vector<std::string> types;
  bool f16 = false, bf16 = false;
  for (DType t : rule.dtypes) {
    types.push_back(dtype_name(t));
    f16 |= t == DType::F16, bf16 |= t == DType::BF16;
  }
  // --sweep's types: the step's own sweep's (the decode step's: f16), else f16 and bf16 where both run.
  std::string sweep_dtypes = f16 && bf16 ? "f16 and bf16" : "";
  if (step.sweep) {
    sweep_dtypes.clear();
    for (const Problem& q : step.sweep())
      if (sweep_dtypes.find(dtype_name(q.attn.dtype)) == std::string::npos)
        sweep_dtypes += (sweep_dtypes.empty() ? "" : " and ") + std::string(dtype_name(q.attn.dtype));
  }
  parser.add_string("--dtype", &flags.dtype,
                    std::string("element type of Q, K, V, O (default ") + dtype_name(p.attn.dtype) +
                        (sweep_dtypes.empty() ? "" : "; --sweep: " + sweep_dtypes) + ")",
                    types);
  parser.add_string("--input", &flags.input,
                    std::string("read Q, K, V") +
                        (bwd_default ? " (and dO unless --fwd-only)" : step.attn_bwd ? " (and dO with --bwd)" : "") +
                        " from PREFIX.q.npy, PREFIX.k.npy, PREFIX.v.npy" + (step.attn_bwd ? " (PREFIX.dout.npy)" : "") +
                        ": 4-D [batch, heads, seq, head_dim], rounded to --dtype; the shape flags given must match");
  if (step.attn_rule.kv_cache)
    parser.add_string("--cache-lens", &flags.cache_lens,
                      "a KV cache (decoding): each sequence's length, comma-separated (one per --batch entry, or one "
                      "for all); --seq-k is the capacity (default: the longest); causal aligns each sequence's last "
                      "query with its last key");
  else  // refused as it is read, before any other check of the problem could complain first
    parser.refuse("--cache-lens", std::string(step.name) +
                                      " has no KV cache (--cache-lens is for the decoding steps: split-KV and paged)");
  if (step.attn_rule.paged)
    parser.add_int("--page-size", &flags.page_size, 1, 1 << 20,
                   "a paged KV cache: K and V in pages of this many keys, [pages, page size, K/V heads, head_dim], "
                   "through a block table drawn at random from --seed (every page used once, in a shuffled order, "
                   "with spare pages no sequence names); with --cache-lens, or every sequence --seq-k long");
  else
    parser.refuse("--page-size", std::string(step.name) + " reads no paged KV cache (--page-size)");
  parser.add_string("--inputs", &flags.inputs,
                    std::string("how the random Q, K, V") + (step.attn_bwd ? " (and dO)" : "") +
                        " are drawn: uniform in [-0.5, 1.5)" + (step.attn_bwd ? ", dO in [-1, 1)" : "") +
                        " (default; what the tests check), or randn: standard normal, as published benchmarks draw "
                        "them (torch.randn); query row 1 of head 0 20x larger either way; rows of randn problems end "
                        "in ' randn'",
                    {"uniform", "randn"});
  if (!step.variants.empty())  // named alternatives of the step, e.g. two ways to compute one output
    parser.add_string("--variant", &flags.variant, "which of the step's variants runs (default " + step.variants[0] + ")",
                      step.variants);
  parser.conflicts("--input", "--inputs", "--input reads the inputs from files");
  if (bwd_default) parser.conflicts("--bwd", "--fwd-only", "--fwd-only runs the forward alone");
  parser.conflicts("--seq", "--seq-q", "--seq sets both lengths");
  parser.conflicts("--seq", "--seq-k", "--seq sets both lengths");
}

// Reads --input's Q, K, V (and dO) and sets the shape from them, checking the shape flags
// given against them; the values are rounded to the problem's element type, as random ones are.
void read_input(const ArgParser& parser, Problem& p, RunOptions& o) {
  std::vector<std::string> names{"q", "k", "v"};
  if (p.backward) names.push_back("dout");
  std::vector<NpyArray> arrays;
  std::string shapes;
  for (const std::string& n : names) {
    const std::string path = flags.input + "." + n + ".npy";
    arrays.push_back(read_npy(path));
    const std::vector<std::size_t>& sh = arrays.back().shape;
    shapes += (shapes.empty() ? "'" : ", '") + path + "' is " + shape_string(sh);
    if (sh.size() != 4)
      throw UsageError("'" + path + "' is " + shape_string(sh) + ": expected 4-D [batch, heads, seq, head_dim]");
    for (std::size_t d : sh)
      if (d == 0 || d > std::size_t(INT_MAX))
        throw UsageError("'" + path + "' is " + shape_string(sh) + ": a dimension is 0 or too large");
  }
  const std::vector<std::size_t>&q = arrays[0].shape, &k = arrays[1].shape;
  const std::string rule =
      " (Q and dO [batch, heads, seq_q, head_dim], K and V [batch, kv_heads, seq_k, head_dim], heads a multiple of "
      "kv_heads)";
  if (arrays[2].shape != k || (p.backward && arrays[3].shape != q) || q[0] != k[0] || q[1] % k[1] != 0 || q[3] != k[3])
    throw UsageError("--input: " + shapes + ": the shapes do not agree" + rule);
  const long long B = q[0], H = q[1], KVH = k[1], Sq = q[2], Sk = k[2], D = q[3];
  for (auto [flag, value, file] :
       {std::tuple{"--batch", flags.batch, B}, std::tuple{"--heads", flags.heads, H},
        std::tuple{"--kv-heads", flags.kv_heads, KVH},
        std::tuple{"--seq", flags.seq, Sq}, std::tuple{"--seq", flags.seq, Sk}, std::tuple{"--seq-q", flags.seq_q, Sq},
        std::tuple{"--seq-k", flags.seq_k, Sk}, std::tuple{"--head-dim", flags.head_dim, D}})
    if (parser.given(flag) && value != file)
      throw UsageError(std::string(flag) + " " + std::to_string(value) +
                       " does not match the --input files: " + shapes + rule);
  p.attn.batch = int(B), p.attn.heads = int(H), p.attn.kv_heads = KVH == H ? 0 : int(KVH);
  p.attn.seq_q = int(Sq), p.attn.seq_k = int(Sk),
  p.attn.head_dim = int(D);
  if (!parser.given("--scale")) p.attn.scale = float(1.0 / std::sqrt(double(D)));
  o.input_path = flags.input;
  o.inputs.clear();
  for (const NpyArray& a : arrays) {
    o.inputs.emplace_back(a.data.begin(), a.data.end());
    round_to(p.attn.dtype, o.inputs.back());
  }
}

// --cache-lens: a KV cache, one length per sequence (or one for all); the capacity is --seq-k (or
// --seq, or --input's K) if given, else the longest length.
void read_cache_lens(const ArgParser& parser, Problem& p, RunOptions& o) {
  std::vector<int> lens;
  try {
    lens = parse_seq_lens(flags.cache_lens);
  } catch (const UsageError& e) {
    throw UsageError(std::string("--cache-lens ") + e.what());
  }
  if (lens.size() == 1) lens.assign(std::size_t(p.attn.batch), lens[0]);
  p.attn.kv_cache = true;
  if (!parser.given("--seq-k") && !parser.given("--seq") && flags.input.empty())
    p.attn.seq_k = std::max(1, *std::max_element(lens.begin(), lens.end()));
  try {  // the lengths' refusals name the flag, as its parse errors do
    check_seq_lens(p.attn, lens);
  } catch (const UsageError& e) {
    throw UsageError("--cache-lens " + flags.cache_lens + ": " + e.what());
  }
  o.seq_lens = std::move(lens);
}

void resolve(const ArgParser& parser, Problem& p, RunOptions& o) {
  flags.kv_heads_given = parser.given("--kv-heads");
  // --heads without --kv-heads: MHA, whatever K/V heads the default problem had (said where it had fewer)
  const bool mha = parser.given("--heads") && !flags.kv_heads_given;
  if (mha && flags.input.empty() && p.attn.kv_heads > 0 && p.attn.kv_heads != p.attn.heads)
    say(o, "note: --heads " + std::to_string(flags.heads) + " without --kv-heads runs MHA (" +
               std::to_string(flags.heads) + " K/V heads; the default problem has " + std::to_string(p.attn.kv_heads) +
               " K/V heads for " + std::to_string(p.attn.heads) + " heads)");
  p.attn.batch = int(flags.batch), p.attn.heads = int(flags.heads), p.attn.kv_heads = mha ? 0 : int(flags.kv_heads);
  p.attn.seq_q = int(flags.seq ? flags.seq : flags.seq_q);
  p.attn.seq_k = int(flags.seq ? flags.seq : flags.seq_k);
  p.attn.head_dim = int(flags.head_dim);
  p.attn.scale = float(flags.scale > 0 ? flags.scale : 1.0 / std::sqrt(double(flags.head_dim)));
  p.attn.causal = flags.causal;
  if (!flags.dtype.empty()) p.attn.dtype = parse_dtype(flags.dtype);  // else the default problem's
  if (flags.fwd_only) flags.bwd = false;  // the sweep reads flags.bwd too
  p.backward = flags.bwd;
  p.attn.variant = variant_index();
  o.randn = flags.inputs == "randn";
  if (!flags.input.empty()) read_input(parser, p, o);
  if (!flags.cache_lens.empty()) read_cache_lens(parser, p, o);
  if (flags.page_size > 0) {  // a paged cache: every sequence seq_k long unless --cache-lens says otherwise
    p.attn.kv_cache = true;     // (o.seq_lens stays empty then: --sweep's problems each have their own batch)
    p.attn = paged_params(p.attn, lens_or_full(p.attn, o.seq_lens), int(flags.page_size));
  }
}

// The problem a previous step runs beside `p`: `p`, or, for a fp16/bf16 problem that the
// previous step runs only in fp32, the fp32 version of it (on the same rounded inputs).
// The previous step runs its own default variant.
Problem prev_problem(const StepInfo& prev, const Problem& problem) {
  Problem p = problem;
  p.attn.variant = 0;
  p.attn.page_size = p.attn.num_pages = p.attn.max_pages = 0;  // a paged cache's previous step reads it contiguous
  if (!is_lowp(p.attn.dtype) || step_supports(prev, p).empty()) return p;
  Problem q = p;
  q.attn.dtype = DType::F32;
  return step_supports(prev, q).empty() ? q : p;
}
std::size_t workspace_bytes(const StepInfo& s, const Problem& p) {
  return attention::workspace_bytes(s, p.attn, p.backward);
}
// Device bytes one step needs: Q, K, V, O, LSE (+ dO, dQ, dK, dV) and its workspace.
double device_bytes(const StepInfo& s, const Problem& p) {
  const AttnParams& a = p.attn;
  const double e = double(dtype_bytes(a.dtype));
  double b = e * (2.0 * q_elems(a) + 2.0 * k_elems(a)) + 4.0 * rows(a);
  if (p.backward) b += e * (2.0 * q_elems(a) + 2.0 * k_elems(a));
  return b + double(workspace_bytes(s, p));
}

std::string gib(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f GiB", bytes / double(1ull << 30));
  return buf;
}

void validate(const StepInfo& step, const Problem& p, const DeviceInfo* dev) {
  const AttnParams& a = p.attn;
  if (a.batch < 1 || a.heads < 1 || a.seq_q < 1 || a.seq_k < 1 || a.head_dim < 1)
    throw UsageError("batch, heads, seq_q, seq_k and head_dim must all be at least 1");
  if (double(q_elems(a)) > double(1ll << 31) || double(k_elems(a)) > double(1ll << 31))
    throw UsageError(p.describe() + ": a tensor has more than 2^31 elements");
  if (p.backward && !step.attn_bwd) throw UsageError(std::string(step.name) + " has no backward pass (drop --bwd)");
  if (!step.attn_fwd) throw UsageError(std::string(step.name) + " has no attention forward");
  if (dev) {
    std::size_t free_b = 0, total_b = 0;
    FA_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    const double need = device_bytes(step, p), work = double(workspace_bytes(step, p));
    if (need > 0.92 * double(free_b))
      throw UsageError(std::string(step.name) + " needs " + gib(need) + " of device memory for " + p.describe() +
                       (work > 0 ? " (" + gib(work) + " of it workspace: " +
                                       (step.workspace_note ? step.workspace_note : "see the step") + ")"
                                 : std::string()) +
                       "; the device has " + gib(double(free_b)) + " free");
  }
}

// ---- setting up: this step's run and the previous step's, on the same inputs ---------------------
// A paged cache (--page-size): the inputs' K and V also as pages, through a block table drawn from the seed.
Inputs paged(const AttnParams& a, std::uint64_t seed, Inputs in) {
  if (a.page_size > 0) page_inputs(a, in, seed + 7);
  return in;
}

struct Runs {
  const Inputs in;            // host, rounded to the problem's type
  const DeviceInputs inputs;  // on the device, in the problem's type
  Run me;
  std::unique_ptr<Run> before;  // the previous step; null without one or without room for it
  bool prev_upcast = false;     // `before` runs the fp32 problem on the rounded inputs (its own copy)
  bool prev_bwd = false;        // `before` runs its backward too

  Runs(const StepInfo& step, const StepInfo* prev, const Problem& p, const RunOptions& o)
      : in(paged(p.attn, o.seed,
                 o.inputs.empty() ? make_inputs(p.attn, p.backward, o.seed, o.seq_lens,  // else --input, read by resolve()
                                                o.randn ? InputDist::Randn : InputDist::Uniform)
                                  : Inputs{o.inputs[0], o.inputs[1], o.inputs[2],
                                           p.backward ? o.inputs[3] : std::vector<float>{}, {},
                                           p.attn.kv_cache ? lens_or_full(p.attn, o.seq_lens) : std::vector<int>{}})),
        inputs(p.attn.dtype, in),
        me(step, p.attn, p.backward, inputs) {
    if (!prev) return;
    const Problem pp = prev_problem(*prev, p);  // what the previous step runs
    prev_upcast = pp.attn.dtype != p.attn.dtype;
    std::size_t free_b = 0, total_b = 0;
    FA_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    if (device_bytes(*prev, pp) < 0.92 * double(free_b))
      before = prev_upcast ? std::make_unique<Run>(*prev, pp.attn, p.backward, in)
                           : std::make_unique<Run>(*prev, pp.attn, p.backward, inputs);
    else
      say(o, std::string("  note: not enough device memory left to run ") + prev->name + " beside " + step.name);
    prev_bwd = before && p.backward && prev->attn_bwd;
  }
  // The previous step's name, and what it runs when that is not the problem itself.
  std::string prev_label() const {
    return std::string(before->step.name) + (prev_upcast ? " (fp32 on the same rounded inputs)" : "");
  }
};

// The gradients in the order of Outputs::grad: their names, and whether a row is a query row.
constexpr const char* kGradNames[] = {"dQ", "dK", "dV"};
bool grad_of_queries(int g) { return g == 0; }

// Prints each check's line and remembers whether all passed.
struct Report {
  const RunOptions& o;
  bool ok = true;
  template <class Result>  // a CompareResult or a RowCompareResult
  void operator()(const std::string& what, const Result& c) {
    say(o, "  check " + what + ": " + c.summary());
    ok &= c.ok();
  }
};

// ---- check_fp32: O, LSE (and dQ, dK, dV) against the previous step and fp64 ----------------------
// Every element against the previous step (same problem); fp64 on as many whole heads as
// kRefMacs allows, spread over batch and heads (none: skipped, said so). Returns
// max |mine - previous step| over every output compared, or -1 without a previous step.
double check_fp32(const Problem& p, Runs& runs, const Outputs& out, Report& report) {
  const AttnParams& a = p.attn;
  const std::string name = runs.me.step.name;
  auto grad_tol = [](const auto& want) {
    return scaled_tolerance(tol::kAttnGradAtolRel, tol::kAttnGradRtol, want, tol::kAttnGradAtolFloor);
  };
  double err_prev = -1;
  if (runs.before) {
    const std::string prev = runs.before->step.name;
    const Outputs theirs = run_checked(*runs.before, runs.prev_bwd);
    const CompareResult co =
        compare(out.o, theirs.o, scaled_tolerance(tol::kAttnOutAtolRel, tol::kAttnOutRtol, theirs.o), q_shape(a));
    report(name + " O vs " + prev, co);
    report(name + " LSE vs " + prev, compare(out.lse, theirs.lse, tol::kAttnLse, lse_shape(a)));
    err_prev = co.max_abs_err;
    for (int g = 0; runs.prev_bwd && g < 3; ++g) {
      const CompareResult c = compare(*out.grad(g), *theirs.grad(g), grad_tol(*theirs.grad(g)),
                                      grad_of_queries(g) ? q_shape(a) : k_shape(a));
      report(name + " " + kGradNames[g] + " vs " + prev, c);
      err_prev = std::max(err_prev, c.max_abs_err);
    }
  }
  const double macs = double(a.seq_q) * a.seq_k * a.head_dim * (p.backward ? 3.5 : 1.0);  // one head
  const std::size_t bh = std::size_t(a.batch) * a.heads;
  const HeadRef ref = reference_heads(a, p.backward, runs.in, spread_heads(bh, std::size_t(kRefMacs / macs)));
  if (ref.heads.empty()) {
    say(report.o,
        "  check vs fp64 reference: skipped (one head is beyond the CPU budget of --check; the tests cover the "
        "reference on smaller shapes)");
    return err_prev;
  }
  const std::string heads = " (" + std::to_string(ref.heads.size()) + " of " + std::to_string(bh) + " heads)";
  const std::size_t qs = std::size_t(a.seq_q) * a.head_dim, ks = std::size_t(a.seq_k) * a.head_dim;
  report(name + " O vs fp64" + heads, compare(gather_rows(out.o, ref.heads, qs), ref.o,
                                              scaled_tolerance(tol::kAttnOutAtolRel, tol::kAttnOutRtol, ref.o)));
  report(name + " LSE vs fp64" + heads, compare(gather_rows(out.lse, ref.heads, a.seq_q), ref.lse, tol::kAttnLse));
  const std::vector<double>* want[] = {&ref.dq, &ref.dk, &ref.dv};
  for (int g = 0; p.backward && g < 3; ++g)
    report(name + " " + kGradNames[g] + " vs fp64" + heads,
           compare(grad_of_queries(g) ? gather_rows(*out.grad(g), ref.heads, qs) : gather_rows(*out.grad(g), ref.kv_heads, ks),
                   *want[g], grad_tol(*want[g])));
  return err_prev;
}

// ---- check_lowp: the fp16/bf16 forward, per query row ---------------------------------------------
// The fp64 reference and ref_lowp on query rows sampled within kRefMacs (every problem is checked
// against fp64); those rows of O against fp64 with the per-row rule (tolerance.h), every element
// of O against the previous step (same type, or fp32 on the same rounded inputs) with the
// largest per-row bound of the sampled rows; LSE with kAttnLseLowp. `theirs`: the previous
// step's outputs (null without one). Returns max |O - O_prev|, or -1 without a previous step.
double check_lowp(const Problem& p, const Runs& runs, const Outputs& out, const Outputs* theirs, Report& report) {
  const AttnParams& a = p.attn;
  const std::size_t D = a.head_dim;
  const double macs = 4.0 * a.seq_k * a.head_dim;  // S and P·V, for the fp64 and the lowp reference
  const RowRef ref = reference_rows(a, runs.in, sample_rows(rows(a), std::size_t(std::max(1.0, kRefMacs / macs))));
  const std::vector<double> bound = lowp_row_bounds(ref.o, ref.o_lowp, D, a.dtype);
  const double max_bound = *std::max_element(bound.begin(), bound.end());
  const std::string name = runs.me.step.name,
                    sampled = std::to_string(ref.rows.size()) + " of " + std::to_string(rows(a)) + " query rows";
  double err_prev = -1;
  if (theirs) {
    const CompareResult co = compare(out.o, theirs->o, Tolerance{max_bound, 0}, q_shape(a));
    report(name + " O vs " + runs.prev_label() + ", every element, atol = the largest per-row bound of the " + sampled +
               " checked against fp64",
           co);
    report(name + " LSE vs " + runs.prev_label(), compare(out.lse, theirs->lse, tol::kAttnLseLowp, lse_shape(a)));
    err_prev = co.max_abs_err;
  }
  say(report.o, "  (" + std::string(dtype_name(a.dtype)) + " rule, per query row: max|O - ref| <= " +
                    std::to_string(int(tol::kLowpErrFactor)) + " max|ref_lowp - ref| + 1 ulp of max|ref|)");
  report(name + " O vs fp64 (" + sampled + ")",
         compare_rows(gather_rows(out.o, ref.rows, D), ref.o, D, bound, q_shape(a), ref.rows));
  // LSE: the element rule of kAttnLseLowp as one bound per row, so a mismatch names its real row
  std::vector<double> lse_bound(ref.lse.size());
  for (std::size_t i = 0; i < lse_bound.size(); ++i)
    lse_bound[i] = tol::kAttnLseLowp.atol + tol::kAttnLseLowp.rtol * std::fabs(ref.lse[i]);
  char rule[64];
  std::snprintf(rule, sizeof rule, "atol %g + rtol %g |ref|", tol::kAttnLseLowp.atol, tol::kAttnLseLowp.rtol);
  std::vector<std::size_t> lse_rows = lse_shape(a);
  lse_rows.push_back(1);
  report(name + " LSE vs fp64 (" + sampled + ", " + rule + ")",
         compare_rows(gather_rows(out.lse, ref.rows, 1), ref.lse, 1, lse_bound, lse_rows, ref.rows));
  return err_prev;
}

// ---- check_lowp_bwd: the fp16/bf16 backward, per query row of dQ and per key row of dK, dV --------
// The same rule as the forward's (tolerance.h), with ref_lowp the backward of
// ref::attention_backward_*_rows with rounding, its delta from the step's own O. Rows sampled within
// kRefMacs each:
//   dQ      query rows over every head: ~6·seq_k·d multiply-adds each (the S, dP and dQ rows, in
//           fp64 and in low precision), so every problem is checked against fp64;
//   dK, dV  key rows in K/V heads spread over batch and K/V heads: a K/V head first needs the
//           statistics of all query rows of its G = H / KVH query heads, ~4·G·seq_q·seq_k·d (one
//           K/V head whatever that costs: some seconds on 16 cores at seq 16384, d 128, G = 1),
//           then ~8·G·seq_q·d per key row.
// Every element of each gradient against the previous step's (when it runs the backward) with
// kSampledBoundMargin times the largest per-row bound of its sampled rows; where the previous
// step's O differs from this step's, those bounds of dQ and dK add what delta from its O moves
// (tolerance.h, add_from_prev_o: a third more work on the same rows). Returns max |mine -
// previous step| over the gradients, or -1 without them.
double check_lowp_bwd(const Problem& p, const Runs& runs, const Outputs& out, const Outputs* theirs, Report& report) {
  const AttnParams& a = p.attn;
  const std::size_t D = a.head_dim, bkv = std::size_t(a.batch) * kv_heads_of(a);
  const double sq = a.seq_q, sk = a.seq_k, d = a.head_dim, G = double(a.heads / kv_heads_of(a));
  const std::vector<std::size_t> q_rows = sample_rows(rows(a), std::size_t(std::max(1.0, kRefMacs / (6 * sk * d))));
  const std::vector<std::size_t> heads = spread_heads(bkv, std::size_t(std::max(1.0, kRefMacs / (4 * G * sq * sk * d))));
  std::vector<std::size_t> k_rows;  // sampled over the key rows of `heads` (K/V heads), then named in the whole problem
  for (std::size_t t : sample_rows(heads.size() * a.seq_k, std::size_t(std::max(1.0, kRefMacs / (8 * G * sq * d)))))
    k_rows.push_back(heads[t / a.seq_k] * a.seq_k + t % a.seq_k);
  Inputs given = runs.in;  // ref_lowp's delta from the O this step's backward was given (out.o)
  given.o = out.o;
  const bool other_o = theirs && theirs->o != out.o;  // a previous step with another forward: its O too
  const BwdRowRef ref = reference_bwd_rows(a, given, q_rows, k_rows, other_o ? &theirs->o : nullptr);

  const std::string name = runs.me.step.name,
                    n_heads = std::to_string(bkv) + (kv_heads_of(a) == a.heads ? "" : " K/V");
  const std::vector<double>* fp64[] = {&ref.dq, &ref.dk, &ref.dv};
  const std::vector<double>* lowp[] = {&ref.dq_lowp, &ref.dk_lowp, &ref.dv_lowp};
  const std::vector<double>* from_o[] = {&ref.dq_given, &ref.dk_given, nullptr};
  double err_prev = -1;
  std::vector<double> bound[3];
  std::string sampled[3];
  for (int g = 0; g < 3; ++g) {
    bound[g] = lowp_row_bounds(*fp64[g], *lowp[g], D, a.dtype, from_o[g], tol::kAttnGradAtolFloor);
    sampled[g] = grad_of_queries(g) ? std::to_string(q_rows.size()) + " of " + std::to_string(rows(a)) + " query rows"
                                    : std::to_string(k_rows.size()) + " key rows of " + std::to_string(heads.size()) +
                                          " of " + n_heads + " heads";
  }
  // Against the previous step, every element: the sampled rows' largest bound times
  // kSampledBoundMargin (a row outside the sample may need more), plus one ulp of the element
  // (rtol = ulp(1)): two steps that sum in different orders may round the same gradient to
  // neighbouring 16-bit values, and the sampled rows' ulp covers only their own magnitudes. A
  // previous step with another forward (another O) carries the error of its own O as well.
  std::vector<double> prev_bound[3] = {bound[0], bound[1], bound[2]};
  if (other_o) {
    add_from_prev_o(prev_bound[0], ref.dq, ref.dq_prev, D);
    add_from_prev_o(prev_bound[1], ref.dk, ref.dk_prev, D);
  }
  for (int g = 0; theirs && g < 3; ++g) {
    const double max_bound = tol::kSampledBoundMargin * *std::max_element(prev_bound[g].begin(), prev_bound[g].end());
    const CompareResult c = compare(*out.grad(g), *theirs->grad(g), Tolerance{max_bound, ulp(a.dtype, 1.0)},
                                    grad_of_queries(g) ? q_shape(a) : k_shape(a));
    report(name + " " + kGradNames[g] + " vs " + runs.prev_label() + ", every element, atol = " +
               std::to_string(int(tol::kSampledBoundMargin)) + " × the largest per-row bound of the " + sampled[g] +
               " checked against fp64" + (other_o && g < 2 ? " + what delta from its O moves" : "") + ", rtol = 1 ulp",
           c);
    err_prev = std::max(err_prev, c.max_abs_err);
  }
  say(report.o, "  (" + std::string(dtype_name(a.dtype)) + " rule, per query row of dQ and key row of dK, dV: " +
                    "max|g - ref| <= " + std::to_string(int(tol::kLowpErrFactor)) +
                    " max|ref_lowp - ref| + 1 ulp of max|ref|, + for dQ, dK what delta from the 16-bit O alone moves)");
  for (int g = 0; g < 3; ++g) {
    const std::vector<std::size_t>& ids = grad_of_queries(g) ? ref.q_rows : ref.k_rows;
    report(name + " " + kGradNames[g] + " vs fp64 (" + sampled[g] + ")",
           compare_rows(gather_rows(*out.grad(g), ids, D), *fp64[g], D, bound[g],
                        grad_of_queries(g) ? q_shape(a) : k_shape(a), ids));
  }
  return err_prev;
}

// ---- check: every check of --check, in order; "PASS" or "FAIL" and the error vs the previous step --
std::pair<std::string, double> check(const Problem& p, Runs& runs, const RunOptions& o) {
  Report report{o};
  const Outputs out = run_checked(runs.me, p.backward);
  double err_prev;
  if (!is_lowp(p.attn.dtype)) {
    err_prev = check_fp32(p, runs, out, report);
  } else {
    std::unique_ptr<Outputs> theirs;  // the previous step's forward (and backward where it has one)
    if (runs.before) theirs = std::make_unique<Outputs>(run_checked(*runs.before, runs.prev_bwd));
    err_prev = check_lowp(p, runs, out, theirs.get(), report);
    if (p.backward)
      err_prev = std::max(err_prev, check_lowp_bwd(p, runs, out, runs.prev_bwd ? theirs.get() : nullptr, report));
  }
  return {report.ok ? "PASS" : "FAIL", err_prev};
}

// ---- time_runs: the step and the previous step interleaved; rows fwd (bwd, fwd+bwd) --------------
// One result row of a timed (ms > 0) or untimed quantity; `flop_factor` in units of the forward's
// FLOPs (FlashAttention's convention: forward 4·B·H·Sq·Sk·d, halved when causal; bwd 2.5x).
// A KV cache (decoding) is memory-bound: its rows count the K/V bytes read (`kv_bytes`) per second,
// against the device's measured copy bandwidth.
// The problem's name ends in " randn" when the inputs were standard normal (--inputs randn): after the
// mode and the variant, so that a uniform row's name is unchanged and no reader of uniform rows
// (profiles/fa_profiles.py split_problem) takes a randn row for one.
ResultRow make_row(const StepInfo& step, const StepInfo* prev, const Problem& p, const DeviceInfo& dev,
                   const RunOptions& o, const std::string& mode, double ms, double prev_ms, double flop_factor,
                   double kv_bytes = 0) {
  const AttnParams& a = p.attn;
  ResultRow r;
  r.step = step.name;
  r.idea = step.idea;
  r.problem = p.describe();
  if (p.backward) {
    Problem named = make(a.batch, a.heads, a.seq_q, a.seq_k, a.head_dim, a.causal, a.dtype);
    named.attn.kv_heads = a.kv_heads;
    r.problem = named.describe() + " " + mode;
  }
  if (a.variant > 0 && std::size_t(a.variant) < step.variants.size())  // not the step's default
    r.problem += " [" + step.variants[a.variant] + "]";
  if (o.randn) r.problem += " randn";
  if (prev) r.prev_step = prev->name;
  if (ms > 0 && a.kv_cache) {
    set_rate(r, ms, kv_bytes, 1e-9, "GB/s", "copy", dev.copy_gbs);
    if (prev_ms > 0) r.prev_time_ms = prev_ms, r.speedup_vs_prev = prev_ms / ms;
  } else if (ms > 0) {
    const double flop =
        flop_factor * 4.0 * a.batch * a.heads * double(a.seq_q) * a.seq_k * a.head_dim / (a.causal ? 2.0 : 1.0);
    const bool f32 = a.dtype == DType::F32;
    set_rate(r, ms, flop, 1e-12, "TFLOP/s", f32 ? "fp32" : "tensor",
             f32 ? dev.fp32_peak_tflops : dev.tensor16_peak_tflops);
    if (prev_ms > 0) r.prev_time_ms = prev_ms, r.speedup_vs_prev = prev_ms / ms;
  }
  return r;
}

std::vector<ResultRow> time_runs(const StepInfo& step, const StepInfo* prev, const Problem& p, Runs& runs,
                                 const RunOptions& o, const DeviceInfo& dev) {
  Run &me = runs.me, *before = runs.before.get();
  std::vector<Launch> fwd{[&](cudaStream_t s) { me.forward(s); }};
  if (before) fwd.push_back([&](cudaStream_t s) { before->forward(s); });
  const std::vector<Timing> tf = time_interleaved(fwd, o.timing);
  FA_CHECK_LAUNCH();
  const double f_prev = before ? tf[1].median_ms : -1;
  double kv_bytes = 0;  // K and V rows within each sequence's length
  for (std::size_t b = 0; b < runs.in.seq_lens.size(); ++b)
    kv_bytes += 2.0 * runs.in.seq_lens[b] * kv_heads_of(p.attn) * p.attn.head_dim * dtype_bytes(p.attn.dtype);
  std::vector<ResultRow> out{make_row(step, prev, p, dev, o, "fwd", tf[0].median_ms, f_prev, 1.0, kv_bytes)};
  if (p.attn.kv_cache && !o.quiet) {  // decoding: the host's share of a call, beside the GPU's
    char line[160];
    std::snprintf(line, sizeof line, "  host: %.2f us per call to enqueue %s (50 calls back to back)",
                  host_us_per_call(fwd[0]), step.name);
    say(o, line);
  }
  if (!p.backward) return out;
  std::vector<Launch> bwd{[&](cudaStream_t s) { me.backward(s); }};
  if (runs.prev_bwd) bwd.push_back([&](cudaStream_t s) { before->backward(s); });
  const std::vector<Timing> tb = time_interleaved(bwd, o.timing);
  FA_CHECK_LAUNCH();
  const double b_prev = runs.prev_bwd ? tb[1].median_ms : -1;
  out.push_back(make_row(step, prev, p, dev, o, "bwd", tb[0].median_ms, b_prev, 2.5));
  out.push_back(make_row(step, prev, p, dev, o, "fwd+bwd", tf[0].median_ms + tb[0].median_ms,
                         runs.prev_bwd ? f_prev + b_prev : -1, 3.5));
  return out;
}

// ---- run: --profile, or --check and/or --bench ---------------------------------------------------
std::vector<ResultRow> run(const StepInfo& step, const StepInfo* prev, const Problem& p, const RunOptions& o,
                           const DeviceInfo& dev) {
  Runs runs(step, prev, p, o);
  if (o.profile) {
    if (p.backward) runs.me.checked_forward();  // the backward reads the forward's O and LSE: make them real first
    profile_one_launch([&](cudaStream_t s) { p.backward ? runs.me.backward(s) : runs.me.forward(s); });
    return {};
  }
  std::string verdict;
  double err_prev = -1;
  if (o.check) std::tie(verdict, err_prev) = check(p, runs, o);
  std::vector<ResultRow> out = o.bench ? time_runs(step, prev, p, runs, o, dev)
                                       : std::vector<ResultRow>{make_row(step, prev, p, dev, o, "fwd", -1, -1, 1.0)};
  for (ResultRow& r : out) r.check = verdict, r.err_vs_prev = err_prev;
  return out;
}

}  // namespace

const FamilyOps kAttentionFamily{"attention",  add_flags, default_problem,     sweep, resolve, validate,
                                 prev_problem, run,       {"--dtype", "--bwd", "--fwd-only", "--variant", "--kv-heads", "--inputs"}};

}  // namespace fa
