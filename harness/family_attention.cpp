// The attention family (steps 04+): inputs, checks (O, LSE; dQ, dK, dV with --bwd) and timing
// of the forward, the backward and both, with the FlashAttention FLOP convention.
//
// fp32 steps (04-08) and fp16/bf16 steps (09+) alike: inputs are drawn in fp32 and rounded to
// the problem's element type on the host, and every reference and every fp32 previous step sees
// the float copies of the rounded values. A 16-bit step is checked with the per-row rule of
// tolerance.h (fp64 reference and ref_lowp on sampled query rows); a previous step that runs
// only fp32 runs the fp32 version of the problem on the same (rounded) inputs.
#include <algorithm>
#include <climits>
#include <cmath>
#include <memory>
#include <set>
#include <thread>
#include <tuple>

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

// CPU budget of the references in --check. fp32: heads are checked while the multiply-adds of
// the checked heads stay under this; beyond it, the previous step is the only comparison.
// fp16/bf16: query rows sampled over every head (the fp64 reference and ref_lowp of each), as
// many as the budget allows, so every problem is checked against fp64.
constexpr double kRefMacs = double(1ll << 31);

struct Flags {
  long long batch = 8, heads = 32, seq = 0, seq_q = 2048, seq_k = 2048, head_dim = 64;
  double scale = 0;
  bool causal = false, bwd = false;
  std::string dtype;  // "" (not given): the step's default problem's
  std::string input;  // --input PREFIX
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

std::vector<Problem> sweep(const StepInfo& step) {
  std::vector<Problem> out;
  for (DType t : sweep_types(step))
    for (bool causal : {false, true})
      for (int d : {64, 128})
        for (int seq : {512, 1024, 2048, 4096, 8192, 16384}) {
          out.push_back(fa2_problem(seq, d, causal, t));
          out.back().backward = flags.bwd;  // --sweep --bwd: the backward too
        }
  return out;
}

void add_flags(ArgParser& parser, const StepInfo& step, Problem& p) {
  flags = Flags{};
  flags.batch = p.attn.batch, flags.heads = p.attn.heads, flags.seq_q = p.attn.seq_q, flags.seq_k = p.attn.seq_k;
  flags.head_dim = p.attn.head_dim, flags.causal = p.attn.causal, flags.bwd = p.backward;
  parser.add_int("--batch", &flags.batch, 1, 1 << 20, "batch size B");
  parser.add_int("--heads", &flags.heads, 1, 1 << 20, "heads H");
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
  parser.add_flag("--causal", &flags.causal, "mask key j > query i (top-left aligned)");
  if (step.attn_bwd)
    parser.add_flag("--bwd", &flags.bwd, "also check and time the backward (fwd, bwd, fwd+bwd)");
  else
    parser.refuse("--bwd", std::string(step.name) + " has no backward pass");
  // --dtype offers the element types the step runs (attn_rule.dtypes).
  std::vector<std::string> types;
  bool f16 = false, bf16 = false;
  for (DType t : rule.dtypes) {
    types.push_back(dtype_name(t));
    f16 |= t == DType::F16, bf16 |= t == DType::BF16;
  }
  parser.add_string("--dtype", &flags.dtype,
                    std::string("element type of Q, K, V, O (default ") + dtype_name(p.attn.dtype) +
                        (f16 && bf16 ? "; --sweep: f16 and bf16" : "") + ")",
                    types);
  parser.add_string("--input", &flags.input,
                    std::string("read Q, K, V") + (step.attn_bwd ? " (and dO with --bwd)" : "") +
                        " from PREFIX.q.npy, PREFIX.k.npy, PREFIX.v.npy" + (step.attn_bwd ? " (PREFIX.dout.npy)" : "") +
                        ": 4-D [batch, heads, seq, head_dim], rounded to --dtype; the shape flags given must match");
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
  const std::string rule = " (Q and dO [batch, heads, seq_q, head_dim], K and V [batch, heads, seq_k, head_dim])";
  if (arrays[2].shape != k || (p.backward && arrays[3].shape != q) || q[0] != k[0] || q[1] != k[1] || q[3] != k[3])
    throw UsageError("--input: " + shapes + ": the shapes do not agree" + rule);
  const long long B = q[0], H = q[1], Sq = q[2], Sk = k[2], D = q[3];
  for (auto [flag, value, file] :
       {std::tuple{"--batch", flags.batch, B}, std::tuple{"--heads", flags.heads, H},
        std::tuple{"--seq", flags.seq, Sq}, std::tuple{"--seq", flags.seq, Sk}, std::tuple{"--seq-q", flags.seq_q, Sq},
        std::tuple{"--seq-k", flags.seq_k, Sk}, std::tuple{"--head-dim", flags.head_dim, D}})
    if (parser.given(flag) && value != file)
      throw UsageError(std::string(flag) + " " + std::to_string(value) +
                       " does not match the --input files: " + shapes + rule);
  p.attn.batch = int(B), p.attn.heads = int(H), p.attn.seq_q = int(Sq), p.attn.seq_k = int(Sk),
  p.attn.head_dim = int(D);
  if (!parser.given("--scale")) p.attn.scale = float(1.0 / std::sqrt(double(D)));
  o.input_path = flags.input;
  o.inputs.clear();
  for (const NpyArray& a : arrays) {
    o.inputs.emplace_back(a.data.begin(), a.data.end());
    round_to(p.attn.dtype, o.inputs.back());
  }
}

void resolve(const ArgParser& parser, Problem& p, RunOptions& o) {
  p.attn.batch = int(flags.batch), p.attn.heads = int(flags.heads);
  p.attn.seq_q = int(flags.seq ? flags.seq : flags.seq_q);
  p.attn.seq_k = int(flags.seq ? flags.seq : flags.seq_k);
  p.attn.head_dim = int(flags.head_dim);
  p.attn.scale = float(flags.scale > 0 ? flags.scale : 1.0 / std::sqrt(double(flags.head_dim)));
  p.attn.causal = flags.causal;
  if (!flags.dtype.empty()) p.attn.dtype = parse_dtype(flags.dtype);  // else the default problem's
  p.backward = flags.bwd;
  if (!flags.input.empty()) read_input(parser, p, o);
}

// The problem a previous step runs beside `p`: `p`, or, for a fp16/bf16 problem that the
// previous step runs only in fp32, the fp32 version of it (on the same rounded inputs).
Problem prev_problem(const StepInfo& prev, const Problem& p) {
  if (!is_lowp(p.attn.dtype) || step_supports(prev, p).empty()) return p;
  Problem q = p;
  q.attn.dtype = DType::F32;
  return step_supports(prev, q).empty() ? q : p;
}
std::size_t q_elems(const AttnParams& a) { return std::size_t(a.batch) * a.heads * a.seq_q * a.head_dim; }
std::size_t k_elems(const AttnParams& a) { return std::size_t(a.batch) * a.heads * a.seq_k * a.head_dim; }
std::size_t rows(const AttnParams& a) { return std::size_t(a.batch) * a.heads * a.seq_q; }
std::size_t workspace_bytes(const StepInfo& s, const Problem& p) {
  std::size_t w = s.fwd_workspace_bytes ? s.fwd_workspace_bytes(p.attn) : 0;
  if (p.backward && s.bwd_workspace_bytes) w = std::max(w, s.bwd_workspace_bytes(p.attn));
  return w;
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

// Inputs: uniform in [-1, 1) + 0.5, so O is not near zero and relative errors mean something,
// and one query row 20x larger (very peaked softmax: the max-subtraction must work). Rounded to
// the problem's element type (fp16/bf16: nearest even): what the step gets is what the
// references and an fp32 previous step get.
struct Inputs {
  std::vector<float> q, k, v, dout;
};
Inputs make_inputs(const Problem& p, std::uint64_t seed) {
  const AttnParams& a = p.attn;
  Inputs in{std::vector<float>(q_elems(a)), std::vector<float>(k_elems(a)), std::vector<float>(k_elems(a)),
            std::vector<float>(p.backward ? q_elems(a) : 0)};
  fill_uniform(in.q, seed, -0.5f, 1.5f);
  fill_uniform(in.k, seed + 1, -0.5f, 1.5f);
  fill_uniform(in.v, seed + 2, -0.5f, 1.5f);
  if (p.backward) fill_uniform(in.dout, seed + 3, -1.f, 1.f);
  const std::size_t big_row = std::min(1, a.seq_q - 1);
  for (int d = 0; d < a.head_dim; ++d) in.q[big_row * a.head_dim + d] *= 20.f;
  for (auto* t : {&in.q, &in.k, &in.v, &in.dout}) round_to(a.dtype, *t);
  return in;
}

// The inputs on the device in one element type (shared by the step and a previous step that
// runs the same type).
struct DeviceInputs {
  DeviceTensor q, k, v, dout;
  DeviceInputs(DType t, const Inputs& in) : q(t, in.q), k(t, in.k), v(t, in.v), dout(t, in.dout) {}
};

// Device state of one step on one problem: its outputs in the problem's element type, and the
// inputs it reads (`shared`, or its own copy of `host` in its type).
struct Run {
  const StepInfo& step;
  std::unique_ptr<DeviceInputs> own;  // set when the inputs are this run's own copy
  const DeviceInputs& in;
  DeviceTensor o;
  DeviceBuffer<float> lse;
  DeviceTensor dq, dk, dv;
  DeviceBuffer<char> workspace;
  AttnFwdArgs fwd{};
  AttnBwdArgs bwd{};
  Run(const StepInfo& s, const Problem& p, const DeviceInputs& shared) : Run(s, p, &shared, nullptr) {}
  Run(const StepInfo& s, const Problem& p, const Inputs& host) : Run(s, p, nullptr, &host) {}
  void forward(cudaStream_t s) { step.attn_fwd(fwd, s); }
  void backward(cudaStream_t s) { step.attn_bwd(bwd, s); }

 private:
  Run(const StepInfo& s, const Problem& p, const DeviceInputs* shared, const Inputs* host)
      : step(s),
        own(shared ? nullptr : std::make_unique<DeviceInputs>(p.attn.dtype, *host)),
        in(shared ? *shared : *own),
        o(p.attn.dtype, q_elems(p.attn)),
        lse(rows(p.attn)),
        dq(p.attn.dtype, p.backward ? q_elems(p.attn) : 0),
        dk(p.attn.dtype, p.backward ? k_elems(p.attn) : 0),
        dv(p.attn.dtype, p.backward ? k_elems(p.attn) : 0),
        workspace(workspace_bytes(s, p)) {
    fwd = {p.attn, in.q.get(), in.k.get(), in.v.get(), o.get(), lse.get(), workspace.get()};
    bwd = {p.attn,    in.q.get(), in.k.get(), in.v.get(), o.get(),        in.dout.get(),
           lse.get(), dq.get(),   dk.get(),   dv.get(),   workspace.get()};
  }
};

void sync_check() {
  FA_CHECK_LAUNCH();
  FA_CUDA_CHECK(cudaDeviceSynchronize());
}

// ---- the fp64 reference on a budget of heads ------------------------------------------------
struct HeadRef {
  std::vector<int> heads;  // flattened b*H + h
  std::vector<std::vector<double>> o, lse, dq, dk, dv;
};
HeadRef reference_heads(const Problem& p, const Inputs& in) {
  const AttnParams& a = p.attn;
  const double macs = double(a.seq_q) * a.seq_k * a.head_dim * (p.backward ? 3.5 : 1.0);
  const int bh = a.batch * a.heads;
  const int n = int(std::min<double>(bh, std::floor(kRefMacs / macs)));
  HeadRef r;
  for (int i = 0; i < n; ++i) r.heads.push_back(n == bh ? i : int((long long)i * (bh - 1) / std::max(1, n - 1)));
  r.o.resize(n), r.lse.resize(n), r.dq.resize(n), r.dk.resize(n), r.dv.resize(n);
  const std::size_t qs = std::size_t(a.seq_q) * a.head_dim, ks = std::size_t(a.seq_k) * a.head_dim;
  const ref::AttnShape shape{1, 1, a.seq_q, a.seq_k, a.head_dim, double(a.scale), a.causal};
  auto one = [&](int i) {
    const std::size_t h = r.heads[i];
    const std::vector<double> q(in.q.begin() + h * qs, in.q.begin() + (h + 1) * qs),
        k(in.k.begin() + h * ks, in.k.begin() + (h + 1) * ks), v(in.v.begin() + h * ks, in.v.begin() + (h + 1) * ks);
    r.o[i].resize(qs), r.lse[i].resize(a.seq_q);
    ref::attention_forward(shape, q.data(), k.data(), v.data(), r.o[i].data(), r.lse[i].data());
    if (!p.backward) return;
    const std::vector<double> dout(in.dout.begin() + h * qs, in.dout.begin() + (h + 1) * qs);
    r.dq[i].resize(qs), r.dk[i].resize(ks), r.dv[i].resize(ks);
    ref::attention_backward(shape, q.data(), k.data(), v.data(), dout.data(), r.dq[i].data(), r.dk[i].data(),
                            r.dv[i].data());
  };
  std::vector<std::thread> pool;
  for (int i = 0; i < n; ++i) pool.emplace_back(one, i);
  for (auto& t : pool) t.join();
  return r;
}

// Gathers the heads of a [B*H, per_head] device result that the reference computed.
std::vector<float> gather(const std::vector<float>& all, const std::vector<int>& heads, std::size_t per_head) {
  std::vector<float> out;
  for (int h : heads) out.insert(out.end(), all.begin() + h * per_head, all.begin() + (h + 1) * per_head);
  return out;
}
std::vector<double> concat(const std::vector<std::vector<double>>& parts) {
  std::vector<double> out;
  for (const auto& x : parts) out.insert(out.end(), x.begin(), x.end());
  return out;
}

// ---- fp16/bf16: the fp64 reference and ref_lowp on a budget of query rows ---------------------
// n of the rows [0, total) of the flattened [batch·heads·seq_q] queries, spread over all heads:
// row 0 and row 1 (row 1 of head 0 is the large-magnitude query row) and the last one, then a
// golden-ratio sequence (evenly spread, and at every offset within a head, unlike a fixed
// stride). All rows when n is more than half of them.
std::vector<std::size_t> sample_rows(std::size_t total, std::size_t n) {
  std::vector<std::size_t> all;
  if (2 * n > total) {
    for (std::size_t i = 0; i < total; ++i) all.push_back(i);
    return all;
  }
  std::set<std::size_t> pick{0, std::min<std::size_t>(1, total - 1), total - 1};
  double x = 0;
  while (pick.size() < n) {
    x += 0.6180339887498949;
    x -= std::floor(x);
    pick.insert(std::min(total - 1, std::size_t(x * double(total))));
  }
  return {pick.begin(), pick.end()};
}

struct RowRef {
  std::vector<std::size_t> rows;       // flattened (b·H + h)·seq_q + i, ascending
  std::vector<double> o, o_lowp, lse;  // [rows, head_dim] fp64 and low precision; [rows] fp64
};
RowRef reference_rows(const Problem& p, const Inputs& in) {
  const AttnParams& a = p.attn;
  const double macs = 4.0 * a.seq_k * a.head_dim;  // S and P·V, for the fp64 and the lowp reference
  RowRef r;
  r.rows = sample_rows(rows(a), std::size_t(std::max(1.0, std::floor(kRefMacs / macs))));
  const std::size_t n = r.rows.size(), D = a.head_dim;
  r.o.resize(n * D), r.o_lowp.resize(n * D), r.lse.resize(n);
  const ref::AttnShape shape{1, 1, a.seq_q, a.seq_k, a.head_dim, double(a.scale), a.causal};
  const std::size_t qs = std::size_t(a.seq_q) * D, ks = std::size_t(a.seq_k) * D;
  auto part = [&](std::size_t begin, std::size_t end) {
    for (std::size_t t = begin; t < end; ++t) {
      const std::size_t h = r.rows[t] / a.seq_q;
      const int i = int(r.rows[t] % a.seq_q);
      const float *q = in.q.data() + h * qs, *k = in.k.data() + h * ks, *v = in.v.data() + h * ks;
      double lse_lowp;
      ref::attention_forward_rows(shape, q, k, v, &i, 1, nullptr, &r.o[t * D], &r.lse[t]);
      ref::attention_forward_rows(shape, q, k, v, &i, 1, rounding(a.dtype), &r.o_lowp[t * D], &lse_lowp);
    }
  };
  const std::size_t workers = std::max(1u, std::thread::hardware_concurrency());
  std::vector<std::thread> pool;
  for (std::size_t w = 0; w < workers; ++w) pool.emplace_back(part, n * w / workers, n * (w + 1) / workers);
  for (auto& t : pool) t.join();
  return r;
}

// The rows of a [rows, per_row] result that `ids` names.
std::vector<float> gather_rows(const std::vector<float>& all, const std::vector<std::size_t>& ids,
                               std::size_t per_row) {
  std::vector<float> out;
  for (std::size_t i : ids) out.insert(out.end(), all.begin() + i * per_row, all.begin() + (i + 1) * per_row);
  return out;
}

// The --check of a fp16/bf16 forward whose O and L (as float) are downloaded: the fp64
// reference and ref_lowp on sampled query rows; those rows of O against fp64 with the per-row
// rule (tolerance.h), every element of O against the previous step (same type, or fp32 on the
// same rounded inputs) with the largest per-row bound of the sampled rows; LSE with kAttnLseLowp.
// Returns max |O - O_prev|, or -1 without a previous step.
template <class Report>
double check_lowp(const RunOptions& o, const StepInfo& step, const Problem& p, const Inputs& in,
                  const std::vector<float>& O, const std::vector<float>& L, Run* before, bool prev_upcast,
                  Report&& report) {
  const AttnParams& a = p.attn;
  const std::size_t D = a.head_dim;
  const std::vector<std::size_t> q_shape{std::size_t(a.batch), std::size_t(a.heads), std::size_t(a.seq_q), D},
      lse_shape{std::size_t(a.batch), std::size_t(a.heads), std::size_t(a.seq_q)};
  const RowRef ref = reference_rows(p, in);
  const std::vector<double> bound = lowp_row_bounds(ref.o, ref.o_lowp, D, a.dtype);
  const double max_bound = *std::max_element(bound.begin(), bound.end());
  const std::string name = step.name,
                    sampled = std::to_string(ref.rows.size()) + " of " + std::to_string(rows(a)) + " query rows";
  double err_prev = -1;
  if (before) {
    before->o.poison_nan(), before->lse.poison_nan();
    before->forward(nullptr);
    sync_check();
    const std::string vs = std::string(before->step.name) + (prev_upcast ? " (fp32 on the same rounded inputs)" : "");
    const CompareResult co = compare(O, before->o.download(), Tolerance{max_bound, 0}, q_shape);
    report(name + " O vs " + vs + ", every element, atol = the largest per-row bound of the " + sampled +
               " checked against fp64",
           co);
    report(name + " LSE vs " + vs, compare(L, before->lse.download(), tol::kAttnLseLowp, lse_shape));
    err_prev = co.max_abs_err;
  }
  say(o, "  (" + std::string(dtype_name(a.dtype)) + " rule, per query row: max|O - ref| <= " +
             std::to_string(int(tol::kLowpErrFactor)) + " max|ref_lowp - ref| + 1 ulp of max|ref|)");
  report(name + " O vs fp64 (" + sampled + ")",
         compare_rows(gather_rows(O, ref.rows, D), ref.o, D, bound, q_shape, ref.rows));
  // LSE: the element rule of kAttnLseLowp as one bound per row, so a mismatch names its real row
  std::vector<double> lse_bound(ref.lse.size());
  for (std::size_t i = 0; i < lse_bound.size(); ++i)
    lse_bound[i] = tol::kAttnLseLowp.atol + tol::kAttnLseLowp.rtol * std::fabs(ref.lse[i]);
  char rule[64];
  std::snprintf(rule, sizeof rule, "atol %g + rtol %g |ref|", tol::kAttnLseLowp.atol, tol::kAttnLseLowp.rtol);
  report(name + " LSE vs fp64 (" + sampled + ", " + rule + ")",
         compare_rows(gather_rows(L, ref.rows, 1), ref.lse, 1, lse_bound, {lse_shape[0], lse_shape[1], lse_shape[2], 1},
                      ref.rows));
  return err_prev;
}

// ---- run --------------------------------------------------------------------------------------
std::vector<ResultRow> run(const StepInfo& step, const StepInfo* prev, const Problem& p, const RunOptions& o,
                           const DeviceInfo& dev) {
  const AttnParams& a = p.attn;
  const bool lowp = is_lowp(a.dtype);
  if (lowp && p.backward && o.check)
    throw UsageError("--check of a fp16/bf16 backward is not implemented (the fp16/bf16 checks cover the forward)");
  const Inputs in =
      o.inputs.empty() ? make_inputs(p, o.seed)  // else --input, read and rounded by resolve()
                       : Inputs{o.inputs[0], o.inputs[1], o.inputs[2], p.backward ? o.inputs[3] : std::vector<float>{}};
  const DeviceInputs inputs(a.dtype, in);
  Run me(step, p, inputs);
  std::unique_ptr<Run> before;
  const Problem pp = prev ? prev_problem(*prev, p) : p;  // what the previous step runs
  const bool prev_upcast = pp.attn.dtype != a.dtype;     // fp32 on the rounded inputs
  if (prev) {
    std::size_t free_b = 0, total_b = 0;
    FA_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    if (device_bytes(*prev, pp) < 0.92 * double(free_b))
      before = prev_upcast ? std::make_unique<Run>(*prev, pp, in) : std::make_unique<Run>(*prev, p, inputs);
    else
      say(o, std::string("  note: not enough device memory left to run ") + prev->name + " beside " + step.name);
  }
  const bool prev_bwd = before && p.backward && prev->attn_bwd;
  const std::vector<std::size_t> q_shape{std::size_t(a.batch), std::size_t(a.heads), std::size_t(a.seq_q),
                                         std::size_t(a.head_dim)},
      k_shape{std::size_t(a.batch), std::size_t(a.heads), std::size_t(a.seq_k), std::size_t(a.head_dim)},
      lse_shape{std::size_t(a.batch), std::size_t(a.heads), std::size_t(a.seq_q)};

  if (o.profile) {
    if (p.backward) {  // the backward reads the forward's O and LSE: make them real first
      me.forward(nullptr);
      sync_check();
    }
    profile_one_launch([&](cudaStream_t s) { p.backward ? me.backward(s) : me.forward(s); });
    return {};
  }
  std::string check;
  double err_prev = -1;
  if (o.check) {
    bool ok = true;
    auto report = [&](const std::string& what, const auto& c) {  // a CompareResult or RowCompareResult
      say(o, "  check " + what + ": " + c.summary());
      ok &= c.ok();
    };
    me.o.poison_nan(), me.lse.poison_nan();
    me.forward(nullptr);
    sync_check();
    std::vector<float> O = me.o.download(), L = me.lse.download(), dQ, dK, dV;
    if (p.backward) {
      me.dq.poison_nan(), me.dk.poison_nan(), me.dv.poison_nan();
      me.backward(nullptr);
      sync_check();
      dQ = me.dq.download(), dK = me.dk.download(), dV = me.dv.download();
    }
    const std::string name = step.name;
    if (lowp) {
      err_prev = check_lowp(o, step, p, in, O, L, before.get(), prev_upcast, report);
    } else {
      if (before) {
        before->o.poison_nan(), before->lse.poison_nan();
        before->forward(nullptr);
        sync_check();
        const std::vector<float> O2 = before->o.download(), L2 = before->lse.download();
        const CompareResult co = compare(O, O2, scaled_tolerance(tol::kAttnOutAtolRel, tol::kAttnOutRtol, O2), q_shape);
        report(name + " O vs " + prev->name, co);
        report(name + " LSE vs " + prev->name, compare(L, L2, tol::kAttnLse, lse_shape));
        err_prev = co.max_abs_err;
        if (prev_bwd) {
          before->dq.poison_nan(), before->dk.poison_nan(), before->dv.poison_nan();
          before->backward(nullptr);
          sync_check();
          for (auto [label, mine, theirs, shape] : {std::tuple{"dQ", &dQ, before->dq.download(), q_shape},
                                                    std::tuple{"dK", &dK, before->dk.download(), k_shape},
                                                    std::tuple{"dV", &dV, before->dv.download(), k_shape}}) {
            const CompareResult c = compare(
                *mine, theirs,
                scaled_tolerance(tol::kAttnGradAtolRel, tol::kAttnGradRtol, theirs, tol::kAttnGradAtolFloor), shape);
            report(name + " " + label + " vs " + prev->name, c);
            err_prev = std::max(err_prev, c.max_abs_err);
          }
        }
      }
      const HeadRef ref = reference_heads(p, in);
      if (ref.heads.empty()) {
        say(o,
            "  check vs fp64 reference: skipped (one head is beyond the CPU budget of --check; the tests cover the "
            "reference on smaller shapes)");
      } else {
        const std::string heads =
            " (" + std::to_string(ref.heads.size()) + " of " + std::to_string(a.batch * a.heads) + " heads)";
        const std::size_t qs = std::size_t(a.seq_q) * a.head_dim, ks = std::size_t(a.seq_k) * a.head_dim;
        const std::vector<double> ro = concat(ref.o);
        report(name + " O vs fp64" + heads,
               compare(gather(O, ref.heads, qs), ro, scaled_tolerance(tol::kAttnOutAtolRel, tol::kAttnOutRtol, ro)));
        report(name + " LSE vs fp64" + heads, compare(gather(L, ref.heads, a.seq_q), concat(ref.lse), tol::kAttnLse));
        if (p.backward) {
          for (auto [label, mine, theirs, per] :
               {std::tuple{"dQ", &dQ, concat(ref.dq), qs}, std::tuple{"dK", &dK, concat(ref.dk), ks},
                std::tuple{"dV", &dV, concat(ref.dv), ks}})
            report(
                name + " " + label + " vs fp64" + heads,
                compare(gather(*mine, ref.heads, per), theirs,
                        scaled_tolerance(tol::kAttnGradAtolRel, tol::kAttnGradRtol, theirs, tol::kAttnGradAtolFloor)));
        }
      }
    }
    check = ok ? "PASS" : "FAIL";
  }

  std::vector<ResultRow> out;
  auto row = [&](const std::string& mode, double ms, double prev_ms, double flop_factor) {
    ResultRow r;
    r.step = step.name;
    r.idea = step.idea;
    r.problem = p.describe();
    if (p.backward)
      r.problem = make(a.batch, a.heads, a.seq_q, a.seq_k, a.head_dim, a.causal, a.dtype).describe() + " " + mode;
    r.check = check;
    r.err_vs_prev = err_prev;
    if (prev) r.prev_step = prev->name;
    if (ms > 0) {
      // FlashAttention's convention: forward 4·B·H·Sq·Sk·d, halved when causal; bwd 2.5x.
      const double flop =
          flop_factor * 4.0 * a.batch * a.heads * double(a.seq_q) * a.seq_k * a.head_dim / (a.causal ? 2.0 : 1.0);
      const bool f32 = a.dtype == DType::F32;
      set_rate(r, ms, flop, 1e-12, "TFLOP/s", f32 ? "fp32" : "tensor",
               f32 ? dev.fp32_peak_tflops : dev.tensor16_peak_tflops);
      if (prev_ms > 0) r.prev_time_ms = prev_ms, r.speedup_vs_prev = prev_ms / ms;
    }
    out.push_back(r);
  };
  if (!o.bench) {
    row("fwd", -1, -1, 1.0);
    return out;
  }
  std::vector<Launch> fwd{[&](cudaStream_t s) { me.forward(s); }};
  if (before) fwd.push_back([&](cudaStream_t s) { before->forward(s); });
  const std::vector<Timing> tf = time_interleaved(fwd, o.timing);
  FA_CHECK_LAUNCH();
  const double f_prev = before ? tf[1].median_ms : -1;
  row("fwd", tf[0].median_ms, f_prev, 1.0);
  if (p.backward) {
    std::vector<Launch> bwd{[&](cudaStream_t s) { me.backward(s); }};
    if (prev_bwd) bwd.push_back([&](cudaStream_t s) { before->backward(s); });
    const std::vector<Timing> tb = time_interleaved(bwd, o.timing);
    FA_CHECK_LAUNCH();
    const double b_prev = prev_bwd ? tb[1].median_ms : -1;
    row("bwd", tb[0].median_ms, b_prev, 2.5);
    row("fwd+bwd", tf[0].median_ms + tb[0].median_ms, prev_bwd ? f_prev + b_prev : -1, 3.5);
  }
  return out;
}

}  // namespace

const FamilyOps kAttentionFamily{"attention",  add_flags, default_problem,     sweep, resolve, validate,
                                 prev_problem, run,       {"--dtype", "--bwd"}};

}  // namespace fa
