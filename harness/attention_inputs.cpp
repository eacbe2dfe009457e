// attention_inputs.cpp: see attention_inputs.h.
#include "attention_inputs.h"

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <limits>
#include <string>

#include "check.h"
#include "random.h"

namespace fa::attention {

std::vector<std::size_t> q_shape(const AttnParams& a) {
  return {std::size_t(a.batch), std::size_t(a.heads), std::size_t(a.seq_q), std::size_t(a.head_dim)};
}
std::vector<std::size_t> k_shape(const AttnParams& a) {
  return {std::size_t(a.batch), std::size_t(kv_heads_of(a)), std::size_t(a.seq_k), std::size_t(a.head_dim)};
}
std::vector<std::size_t> lse_shape(const AttnParams& a) {
  return {std::size_t(a.batch), std::size_t(a.heads), std::size_t(a.seq_q)};
}

std::size_t workspace_bytes(const StepInfo& s, const AttnParams& a, bool backward) {
  std::size_t w = s.fwd_workspace_bytes ? s.fwd_workspace_bytes(a) : 0;
  if (backward && s.bwd_workspace_bytes) w = std::max(w, s.bwd_workspace_bytes(a));
  return w;
}

std::vector<int> parse_seq_lens(const std::string& text) {
  std::vector<int> lens;
  for (std::size_t at = 0; at <= text.size();) {
    const std::size_t end = std::min(text.find(',', at), text.size());
    const std::string item = text.substr(at, end - at);
    char* stop = nullptr;
    errno = 0;
    const long long v = item.empty() ? 0 : std::strtoll(item.c_str(), &stop, 10);
    if (item.empty() || *stop != '\0')
      throw UsageError(text + ": '" + item + "' is not an integer (lengths are comma-separated)");
    if (errno == ERANGE || v < INT_MIN || v > INT_MAX)
      throw UsageError(text + ": '" + item + "' is out of range (a length is at most " + std::to_string(INT_MAX) + ")");
    lens.push_back(int(v));
    at = end + 1;
  }
  return lens;
}

void check_seq_lens(const AttnParams& a, const std::vector<int>& seq_lens) {
  if (!a.kv_cache) {
    if (!seq_lens.empty()) throw UsageError("sequence lengths are given, but the problem has no KV cache");
    return;
  }
  if (seq_lens.size() != std::size_t(a.batch))
    throw UsageError("a KV cache needs one length per sequence: " + std::to_string(seq_lens.size()) +
                     " lengths for batch " + std::to_string(a.batch));
  for (std::size_t b = 0; b < seq_lens.size(); ++b) {
    const std::string which = "sequence " + std::to_string(b) + "'s length " + std::to_string(seq_lens[b]);
    if (seq_lens[b] < 0) throw UsageError(which + " is negative");
    if (seq_lens[b] > a.seq_k)
      throw UsageError(which + " is above the cache capacity (seq_k " + std::to_string(a.seq_k) + ")");
    if (a.causal && seq_lens[b] < a.seq_q)
      throw UsageError(which + " is below seq_q " + std::to_string(a.seq_q) +
                       ": causal, its first query would sit before the sequence's start");
  }
}

const char* input_dist_name(InputDist d) { return d == InputDist::Randn ? "randn" : "uniform"; }

Inputs make_inputs(const AttnParams& a, bool with_dout, std::uint64_t seed, std::vector<int> seq_lens, InputDist dist) {
  if (a.kv_cache && seq_lens.empty()) seq_lens.assign(std::size_t(a.batch), a.seq_k);
  check_seq_lens(a, seq_lens);
  Inputs in{std::vector<float>(q_elems(a)), std::vector<float>(k_elems(a)), std::vector<float>(k_elems(a)),
            std::vector<float>(with_dout ? q_elems(a) : 0), {}, std::move(seq_lens)};
  // Each tensor its own stream (seed + 0..3), so Q, K, V are the same whether dO is drawn or not.
  auto draw = [&](std::vector<float>& t, std::uint64_t s, float lo, float hi) {
    if (dist == InputDist::Randn)
      fill_normal(t, s);
    else
      fill_uniform(t, s, lo, hi);
  };
  draw(in.q, seed, -0.5f, 1.5f);
  draw(in.k, seed + 1, -0.5f, 1.5f);
  draw(in.v, seed + 2, -0.5f, 1.5f);
  if (with_dout) draw(in.dout, seed + 3, -1.f, 1.f);
  const std::size_t big_row = std::min(1, a.seq_q - 1);
  for (int d = 0; d < a.head_dim; ++d) in.q[big_row * a.head_dim + d] *= 20.f;
  for (auto* t : {&in.q, &in.k, &in.v, &in.dout}) round_to(a.dtype, *t);
  // A KV cache: the rows past each sequence's length are NaN (never to be read).
  const std::size_t kvh = std::size_t(kv_heads_of(a)), D = std::size_t(a.head_dim);
  for (std::size_t b = 0; b < in.seq_lens.size(); ++b)
    for (std::size_t h = b * kvh; h < (b + 1) * kvh; ++h)
      for (auto* t : {&in.k, &in.v})
        std::fill(t->begin() + (h * a.seq_k + in.seq_lens[b]) * D, t->begin() + (h + 1) * a.seq_k * D,
                  std::numeric_limits<float>::quiet_NaN());
  return in;
}

Inputs repeat_kv_heads(const AttnParams& a, const Inputs& in) {
  Inputs out = in;
  const std::size_t n = std::size_t(a.seq_k) * a.head_dim, heads = std::size_t(a.batch) * a.heads;
  out.k.resize(heads * n), out.v.resize(heads * n);
  for (std::size_t h = 0; h < heads; ++h) {
    const std::size_t src = kv_head_of(a, h) * n;
    std::copy_n(in.k.begin() + src, n, out.k.begin() + h * n);
    std::copy_n(in.v.begin() + src, n, out.v.begin() + h * n);
  }
  return out;
}

Run::Run(const StepInfo& s, const AttnParams& a, bool backward, const DeviceInputs& shared)
    : Run(s, a, backward, &shared, nullptr) {}
Run::Run(const StepInfo& s, const AttnParams& a, bool backward, const Inputs& host)
    : Run(s, a, backward, nullptr, &host) {}

Run::Run(const StepInfo& s, const AttnParams& a, bool backward, const DeviceInputs* shared, const Inputs* host)
    : step(s),
      own(shared ? nullptr : std::make_unique<DeviceInputs>(a.dtype, *host)),
      in(shared ? *shared : *own),
      o(a.dtype, q_elems(a)),
      lse(rows(a)),
      dq(a.dtype, backward ? q_elems(a) : 0),
      dk(a.dtype, backward ? k_elems(a) : 0),
      dv(a.dtype, backward ? k_elems(a) : 0),
      workspace(workspace_bytes(s, a, backward)) {
  if (a.kv_cache && in.seq_lens.size() != std::size_t(a.batch))
    throw UsageError("a KV cache problem needs its sequences' lengths (Inputs::seq_lens)");
  fwd = {a, in.q.get(), in.k.get(), in.v.get(), o.get(), lse.get(), workspace.get(), in.seq_lens.get()};
  bwd = {a,         in.q.get(), in.k.get(), in.v.get(), o.get(),        in.dout.get(),
         lse.get(), dq.get(),   dk.get(),   dv.get(),   workspace.get()};
}

void Run::checked_forward() {
  o.poison_nan(), lse.poison_nan();
  forward(nullptr);
  FA_CHECK_LAUNCH();
  FA_CUDA_CHECK(cudaDeviceSynchronize());
}

void Run::checked_backward() {
  dq.poison_nan(), dk.poison_nan(), dv.poison_nan();
  backward(nullptr);
  FA_CHECK_LAUNCH();
  FA_CUDA_CHECK(cudaDeviceSynchronize());
}

Outputs run_checked(Run& r, bool backward) {
  r.checked_forward();
  Outputs out{r.o.download(), r.lse.download()};
  if (backward) {
    r.checked_backward();
    out.dq = r.dq.download(), out.dk = r.dk.download(), out.dv = r.dv.download();
  }
  return out;
}

}  // namespace fa::attention
