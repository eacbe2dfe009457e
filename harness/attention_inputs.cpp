// attention_inputs.cpp: see attention_inputs.h.
#include "attention_inputs.h"

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <limits>
#include <string>
#include <utility>

#include "check.h"
#include "parallel.h"
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

AttnParams paged_params(AttnParams a, const std::vector<int>& seq_lens, int page_size, int spare) {
  a.page_size = page_size;
  if (page_size < 1) return a;  // check_paging says why
  long long need = 0;
  int most = 1;
  for (int len : seq_lens) {
    const int pages = (std::max(len, 0) + page_size - 1) / page_size;
    need += pages, most = std::max(most, pages);
  }
  if (need + spare > (1ll << 30)) throw UsageError("a paged cache of more than 2^30 pages");
  a.max_pages = most, a.num_pages = int(need + spare);
  return a;
}

std::vector<int> make_block_table(const AttnParams& a, const std::vector<int>& seq_lens, std::uint64_t seed) {
  std::vector<int> pool(std::size_t(std::max(a.num_pages, 0)));
  for (std::size_t i = 0; i < pool.size(); ++i) pool[i] = int(i);
  std::uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;  // splitmix64 for a Fisher-Yates shuffle
  auto next = [&x] {
    std::uint64_t z = (x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull, z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  };
  for (std::size_t i = pool.size(); i > 1; --i) std::swap(pool[i - 1], pool[next() % i]);
  std::vector<int> table(std::size_t(a.batch) * std::size_t(std::max(a.max_pages, 0)), -1);
  std::size_t used = 0;
  for (std::size_t b = 0; b < seq_lens.size() && b < std::size_t(a.batch); ++b)
    for (int j = 0; j < (seq_lens[b] + a.page_size - 1) / a.page_size && j < a.max_pages && used < pool.size(); ++j)
      table[b * a.max_pages + j] = pool[used++];
  return table;
}

void check_paging(const AttnParams& a, const std::vector<int>& seq_lens, const std::vector<int>& block_table) {
  if (a.page_size < 1) throw UsageError("the page size must be at least 1 (got " + std::to_string(a.page_size) + ")");
  if (a.max_pages < 1 || a.num_pages < 1) throw UsageError("a paged cache needs at least one page per sequence and in its pool");
  if (block_table.size() != std::size_t(a.batch) * std::size_t(a.max_pages))
    throw UsageError("the block table has " + std::to_string(block_table.size()) + " entries; batch " +
                     std::to_string(a.batch) + " × " + std::to_string(a.max_pages) + " pages per sequence need " +
                     std::to_string(std::size_t(a.batch) * a.max_pages));
  for (std::size_t b = 0; b < seq_lens.size(); ++b) {
    const int need = (seq_lens[b] + a.page_size - 1) / a.page_size;
    if (need > a.max_pages)
      throw UsageError("sequence " + std::to_string(b) + "'s length " + std::to_string(seq_lens[b]) + " needs " +
                       std::to_string(need) + " pages of " + std::to_string(a.page_size) + "; its block table holds " +
                       std::to_string(a.max_pages));
    for (int j = 0; j < need; ++j) {
      const int page = block_table[b * a.max_pages + j];
      if (page < 0 || page >= a.num_pages)
        throw UsageError("sequence " + std::to_string(b) + "'s page " + std::to_string(j) + " is page " +
                         std::to_string(page) + ", outside the pool [0, " + std::to_string(a.num_pages) + ")");
    }
  }
}

void page_inputs(const AttnParams& a, Inputs& in, std::uint64_t seed) {
  in.block_table = make_block_table(a, in.seq_lens, seed);
  check_paging(a, in.seq_lens, in.block_table);
  const std::size_t kvh = std::size_t(kv_heads_of(a)), D = std::size_t(a.head_dim), P = std::size_t(a.page_size);
  const std::size_t S = std::size_t(a.seq_k), rows = in.seq_lens.size() * S;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  auto nan_fill = [&](std::vector<float>& t) {
    parallel_ranges(t.size(), [&](std::size_t begin, std::size_t end) { std::fill(t.begin() + begin, t.begin() + end, nan); });
  };
  // One (sequence b, key j) per index, every K/V head of it: make_block_table gives each (b, page) its own
  // page, so no two indices touch the same row and the host's cores can share the copies.
  auto each_row = [&](const auto& copy) {
    parallel_ranges(rows, [&](std::size_t begin, std::size_t end) {
      for (std::size_t i = begin; i < end; ++i) {
        const std::size_t b = i / S, j = i % S;
        if (j >= std::size_t(in.seq_lens[b])) continue;
        const std::size_t page = std::size_t(in.block_table[b * a.max_pages + j / P]);
        for (std::size_t h = 0; h < kvh; ++h) copy(((b * kvh + h) * S + j) * D, ((page * P + j % P) * kvh + h) * D);
      }
    });
  };
  for (auto [from, to] : {std::pair{&in.k, &in.k_pages}, std::pair{&in.v, &in.v_pages}}) {
    to->resize(std::size_t(a.num_pages) * P * kvh * D);
    nan_fill(*to);
    each_row([&](std::size_t row, std::size_t slot) { std::copy_n(from->begin() + row, D, to->begin() + slot); });
    // What a step reads through the table, back into [B, KVH, seq_k, d]: the references' K and V.
    nan_fill(*from);
    each_row([&](std::size_t row, std::size_t slot) { std::copy_n(to->begin() + slot, D, from->begin() + row); });
  }
}

const char* input_dist_name(InputDist d) { return d == InputDist::Randn ? "randn" : "uniform"; }

std::vector<int> lens_or_full(const AttnParams& a, std::vector<int> seq_lens) {
  if (seq_lens.empty()) seq_lens.assign(std::size_t(a.batch), a.seq_k);
  return seq_lens;
}

Inputs make_inputs(const AttnParams& a, bool with_dout, std::uint64_t seed, std::vector<int> seq_lens, InputDist dist) {
  if (a.kv_cache) seq_lens = lens_or_full(a, std::move(seq_lens));
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
  if (a.page_size > 0 && in.block_table.size() != std::size_t(a.batch) * std::size_t(a.max_pages))
    throw UsageError("a paged KV cache problem needs its block table and pages (page_inputs)");
  const bool paged = a.page_size > 0;
  fwd = {a, in.q.get(), paged ? in.k_pages.get() : in.k.get(), paged ? in.v_pages.get() : in.v.get(), o.get(),
         lse.get(), workspace.get(), in.seq_lens.get(), paged ? in.block_table.get() : nullptr};
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
