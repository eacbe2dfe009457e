// attention_reference.cpp: see attention_reference.h.
#include "attention_reference.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <thread>
#include <tuple>

#include "check.h"
#include "reference.h"

namespace fa::attention {
namespace {
// A rounding that rounds nothing: the reference's low-precision path in fp64, which takes delta from
// the O it is given (reference.h).
double no_rounding(double x) { return x; }

// f(i) for i in [0, n), in contiguous slices, one thread per core.
template <class F>
void parallel_for(std::size_t n, F&& f) {
  const std::size_t workers = std::min<std::size_t>(n, std::max(1u, std::thread::hardware_concurrency()));
  std::vector<std::thread> pool;
  for (std::size_t w = 0; w < workers; ++w)
    pool.emplace_back([&, w] {
      for (std::size_t i = n * w / workers; i < n * (w + 1) / workers; ++i) f(i);
    });
  for (auto& t : pool) t.join();
}

// Query head h (flattened b·H + h) of the problem as a problem of its own (batch and heads 1),
// for the per-head references. A KV cache: the keys of h's sequence only, causal aligned to its end.
ref::AttnShape head_shape(const AttnParams& a, const Inputs& in, std::size_t h) {
  const int keys = keys_of(a, in, h / std::size_t(a.heads));
  return {1, 1, a.seq_q, keys, a.head_dim, double(a.scale), a.causal, a.kv_cache ? keys - a.seq_q : 0};
}
void refuse_kv_cache_backward(const AttnParams& a) {
  if (a.kv_cache) throw UsageError("the backward references take no KV cache (per-sequence lengths)");
}

// The query heads that read K/V head g (flattened b·KVH + kv): b·H + kv·G .. + G − 1, G = H / KVH.
// With grouped-query attention dK and dV of g are the sums of their per-query-head terms over these.
std::vector<std::size_t> group_of(const AttnParams& a, std::size_t g) {
  const std::size_t kvh = std::size_t(kv_heads_of(a)), G = std::size_t(a.heads) / kvh;
  std::vector<std::size_t> hs(G);
  for (std::size_t i = 0; i < G; ++i) hs[i] = g / kvh * a.heads + g % kvh * G + i;
  return hs;
}

// out (+)= x over n elements: the first term of a group's sum is copied, the others added in
// ascending query head order (so a group of one is the per-head result itself, bit for bit).
void add_term(double* out, const double* x, std::size_t n, bool first) {
  for (std::size_t e = 0; e < n; ++e) out[e] = first ? x[e] : out[e] + x[e];
}

}  // namespace

HeadRef reference_heads(const AttnParams& a, bool backward, const Inputs& in, const std::vector<std::size_t>& heads) {
  if (backward) refuse_kv_cache_backward(a);
  const std::size_t n = heads.size(), qs = std::size_t(a.seq_q) * a.head_dim, ks = std::size_t(a.seq_k) * a.head_dim;
  HeadRef r{heads, {}, std::vector<double>(n * qs), std::vector<double>(n * a.seq_q)};
  // The K/V heads of dK, dV: those the chosen query heads read. Each needs the backward of every
  // query head of its group (all of them: `work`), not only of the chosen ones.
  std::vector<std::size_t> work = heads;
  if (backward) {
    for (std::size_t h : heads) r.kv_heads.push_back(kv_head_of(a, h));
    std::sort(r.kv_heads.begin(), r.kv_heads.end());
    r.kv_heads.erase(std::unique(r.kv_heads.begin(), r.kv_heads.end()), r.kv_heads.end());
    for (std::size_t g : r.kv_heads)
      for (std::size_t h : group_of(a, g)) work.push_back(h);
    std::sort(work.begin(), work.end());
    work.erase(std::unique(work.begin(), work.end()), work.end());
    r.dq.resize(n * qs), r.dk.resize(r.kv_heads.size() * ks), r.dv.resize(r.kv_heads.size() * ks);
  }
  std::vector<double> dq(backward ? work.size() * qs : 0), dk(dq.empty() ? 0 : work.size() * ks), dv(dk.size());
  parallel_for(work.size(), [&](std::size_t w) {
    const std::size_t h = work[w], g = kv_head_of(a, h);  // g: the K/V head it reads
    const ref::AttnShape shape = head_shape(a, in, h);
    const std::vector<double> q(in.q.begin() + h * qs, in.q.begin() + (h + 1) * qs),
        k(in.k.begin() + g * ks, in.k.begin() + (g + 1) * ks), v(in.v.begin() + g * ks, in.v.begin() + (g + 1) * ks);
    for (std::size_t i = 0; i < n; ++i)  // the chosen heads' forward (work also holds unchosen ones)
      if (heads[i] == h) ref::attention_forward(shape, q.data(), k.data(), v.data(), &r.o[i * qs], &r.lse[i * a.seq_q]);
    if (!backward) return;
    const std::vector<double> dout(in.dout.begin() + h * qs, in.dout.begin() + (h + 1) * qs);
    ref::attention_backward(shape, q.data(), k.data(), v.data(), dout.data(), &dq[w * qs], &dk[w * ks], &dv[w * ks]);
  });
  if (!backward) return r;
  auto at = [&](std::size_t h) { return std::size_t(std::lower_bound(work.begin(), work.end(), h) - work.begin()); };
  for (std::size_t i = 0; i < n; ++i) std::copy_n(&dq[at(heads[i]) * qs], qs, &r.dq[i * qs]);
  for (std::size_t t = 0; t < r.kv_heads.size(); ++t) {
    const std::vector<std::size_t> group = group_of(a, r.kv_heads[t]);
    for (std::size_t m = 0; m < group.size(); ++m) {
      add_term(&r.dk[t * ks], &dk[at(group[m]) * ks], ks, m == 0);
      add_term(&r.dv[t * ks], &dv[at(group[m]) * ks], ks, m == 0);
    }
  }
  return r;
}

std::vector<std::size_t> spread_heads(std::size_t count, std::size_t n) {
  n = std::min(n, count);
  std::vector<std::size_t> heads;
  for (std::size_t i = 0; i < n; ++i)
    heads.push_back(n == count ? i : i * (count - 1) / std::max<std::size_t>(1, n - 1));
  return heads;
}

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

RowRef reference_rows(const AttnParams& a, const Inputs& in, const std::vector<std::size_t>& rows) {
  const std::size_t n = rows.size(), D = a.head_dim;
  RowRef r{rows, std::vector<double>(n * D), std::vector<double>(n * D), std::vector<double>(n)};
  const std::size_t qs = std::size_t(a.seq_q) * D, ks = std::size_t(a.seq_k) * D;
  parallel_for(n, [&](std::size_t t) {
    const std::size_t h = rows[t] / a.seq_q;
    const int i = int(rows[t] % a.seq_q);
    const ref::AttnShape shape = head_shape(a, in, h);
    const std::size_t g = kv_head_of(a, h);  // the K/V head query head h reads
    const float *q = in.q.data() + h * qs, *k = in.k.data() + g * ks, *v = in.v.data() + g * ks;
    const ref::Rounding rounds[2] = {nullptr, rounding(a.dtype)};  // fp64 and low precision, from one row of scores
    double* o[2] = {&r.o[t * D], &r.o_lowp[t * D]};
    double lse[2];
    ref::attention_forward_row(shape, q, k, v, i, rounds, 2, o, lse);
    r.lse[t] = lse[0];
  });
  return r;
}

BwdRowRef reference_bwd_rows(const AttnParams& a, const Inputs& in, const std::vector<std::size_t>& q_rows,
                             const std::vector<std::size_t>& k_rows, const std::vector<float>* prev_o) {
  refuse_kv_cache_backward(a);
  if (prev_o && prev_o->size() != in.q.size())
    throw UsageError("reference_bwd_rows: a second O of " + std::to_string(prev_o->size()) + " elements, Q has " +
                     std::to_string(in.q.size()));
  const std::size_t D = a.head_dim, qs = std::size_t(a.seq_q) * D, ks = std::size_t(a.seq_k) * D;
  const ref::AttnShape shape = head_shape(a, in, 0);  // every head alike without a KV cache
  const ref::Rounding lowp = rounding(a.dtype);
  BwdRowRef r{q_rows, k_rows};
  r.dq.resize(q_rows.size() * D), r.dq_lowp.resize(q_rows.size() * D);
  for (auto* x : {&r.dk, &r.dk_lowp, &r.dv, &r.dv_lowp}) x->resize(k_rows.size() * D);
  auto head = [&](std::size_t h) {  // pointers to query head h's Q, dO and the K, V it reads
    const std::size_t g = kv_head_of(a, h);
    return std::tuple{in.q.data() + h * qs, in.k.data() + g * ks, in.v.data() + g * ks, in.dout.data() + h * qs};
  };
  auto given_o = [&](std::size_t h) { return in.o.empty() ? nullptr : in.o.data() + h * qs; };  // or null

  const bool given = !in.o.empty();
  if (given) r.dq_given.resize(q_rows.size() * D), r.dk_given.resize(k_rows.size() * D);
  if (prev_o) r.dq_prev.resize(q_rows.size() * D), r.dk_prev.resize(k_rows.size() * D);
  // The precisions of query head h's rows, in this order: fp64, low precision, and fp64 with delta from the
  // given O (given: identity rounding) and from the second O (prev_o). Each call below computes a row's dot
  // products once for them all.
  auto precisions = [&](std::size_t h) {
    std::vector<ref::BwdPrecision> p{{nullptr, nullptr}, {lowp, given_o(h)}};
    if (given) p.push_back({no_rounding, given_o(h)});
    if (prev_o) p.push_back({no_rounding, prev_o->data() + h * qs});
    return p;
  };
  // Where query row q_rows[t] puts its dQ row in each precision, as precisions() orders them.
  auto dq_out = [&](std::size_t t) {
    std::vector<double*> out{&r.dq[t * D], &r.dq_lowp[t * D]};
    if (given) out.push_back(&r.dq_given[t * D]);
    if (prev_o) out.push_back(&r.dq_prev[t * D]);
    return out;
  };

  // The statistics (lse, delta; in each precision) of every query row of each query head that reads a K/V
  // head with a key row (its group), one query row per task: lse[c][i] and delta[c][i] of precision c, as
  // precisions() orders them. A query row whose dQ is asked for gets it from the same pass (its dot products
  // computed once).
  std::map<std::size_t, std::size_t> slot;  // query head -> its place in `stats`
  for (std::size_t id : k_rows)
    for (std::size_t h : group_of(a, id / a.seq_k)) slot.emplace(h, slot.size());
  std::vector<std::size_t> heads(slot.size());
  for (auto [h, s] : slot) heads[s] = h;
  std::map<std::size_t, std::size_t> q_task;  // query row id -> its index in q_rows (the first, if repeated)
  for (std::size_t t = 0; t < q_rows.size(); ++t) q_task.emplace(q_rows[t], t);
  std::vector<char> dq_done(q_rows.size(), 0);
  const std::size_t n_prec = precisions(0).size();
  struct Stats {
    std::vector<std::vector<double>> lse, delta;  // [precision][seq_q]
  };
  const std::vector<std::vector<double>> row_stats(n_prec, std::vector<double>(a.seq_q));
  std::vector<Stats> stats(heads.size(), Stats{row_stats, row_stats});
  parallel_for(heads.size() * a.seq_q, [&](std::size_t t) {
    const std::size_t s = t / a.seq_q;
    const int i = int(t % a.seq_q);
    const auto [q, k, v, dout] = head(heads[s]);
    const std::vector<ref::BwdPrecision> precs = precisions(heads[s]);
    const auto asked = q_task.find(heads[s] * a.seq_q + std::size_t(i));
    std::vector<double*> dq;
    if (asked != q_task.end()) dq = dq_out(asked->second), dq_done[asked->second] = 1;
    std::vector<double> lse(n_prec), delta(n_prec);
    ref::attention_backward_q_row(shape, q, k, v, dout, i, precs.data(), int(n_prec), lse.data(), delta.data(),
                                  dq.empty() ? nullptr : dq.data());
    for (std::size_t c = 0; c < n_prec; ++c) stats[s].lse[c][i] = lse[c], stats[s].delta[c][i] = delta[c];
  });
  // The query rows that pass did not reach (their head reads no K/V head with a key row, or a repeat).
  parallel_for(q_rows.size(), [&](std::size_t t) {
    if (dq_done[t]) return;
    const std::size_t h = q_rows[t] / a.seq_q;
    const auto [q, k, v, dout] = head(h);
    const std::vector<ref::BwdPrecision> precs = precisions(h);
    std::vector<double*> dq = dq_out(t);
    std::vector<double> lse(n_prec), delta(n_prec);
    ref::attention_backward_q_row(shape, q, k, v, dout, int(q_rows[t] % a.seq_q), precs.data(), int(n_prec), lse.data(),
                                  delta.data(), dq.data());
  });

  // A key row of K/V head g: the sum over g's query heads of each one's dK, dV row (one term
  // without GQA), in every precision.
  parallel_for(k_rows.size(), [&](std::size_t t) {
    const std::vector<std::size_t> group = group_of(a, k_rows[t] / a.seq_k);
    const int j = int(k_rows[t] % a.seq_k);
    std::vector<std::vector<double>> dk(n_prec, std::vector<double>(D)), dv = dk;
    std::vector<double*> dk_out, dv_out;
    for (std::size_t c = 0; c < n_prec; ++c) dk_out.push_back(dk[c].data()), dv_out.push_back(dv[c].data());
    // Where each precision's rows go (the given and second O's dv: = the fp64 row up to roundoff, as dV does not
    // depend on delta; not kept).
    std::vector<std::pair<double*, double*>> sums{{&r.dk[t * D], &r.dv[t * D]}, {&r.dk_lowp[t * D], &r.dv_lowp[t * D]}};
    if (given) sums.push_back({&r.dk_given[t * D], nullptr});
    if (prev_o) sums.push_back({&r.dk_prev[t * D], nullptr});
    for (std::size_t m = 0; m < group.size(); ++m) {
      const auto [q, k, v, dout] = head(group[m]);
      const Stats& st = stats[slot.at(group[m])];
      const std::vector<ref::BwdPrecision> precs = precisions(group[m]);
      std::vector<const double*> lse, delta;
      for (std::size_t c = 0; c < n_prec; ++c) lse.push_back(st.lse[c].data()), delta.push_back(st.delta[c].data());
      ref::attention_backward_dkdv_row(shape, q, k, v, dout, lse.data(), delta.data(), j, precs.data(), int(n_prec),
                                       dk_out.data(), dv_out.data());
      for (std::size_t c = 0; c < n_prec; ++c) {
        add_term(sums[c].first, dk[c].data(), D, m == 0);
        if (sums[c].second) add_term(sums[c].second, dv[c].data(), D, m == 0);
      }
    }
  });
  return r;
}

std::vector<float> gather_rows(const std::vector<float>& all, const std::vector<std::size_t>& ids,
                               std::size_t per_row) {
  std::vector<float> out;
  out.reserve(ids.size() * per_row);
  for (std::size_t i : ids) out.insert(out.end(), all.begin() + i * per_row, all.begin() + (i + 1) * per_row);
  return out;
}

}  // namespace fa::attention
