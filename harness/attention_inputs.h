// attention_inputs.h: the inputs of an attention problem and one step's device run on them,
// shared by the attention family's --check/--bench (family_attention.cpp) and the GPU tests
// (tests/attention_checks.h), so both draw the same inputs and launch a step the same way.
//
//   make_inputs    Q, K, V uniform in [-0.5, 1.5) (the +0.5 offset keeps O away from zero, so
//                  relative errors mean something), dO in [-1, 1); or, with InputDist::Randn
//                  (--inputs randn), Q, K, V and dO standard normal, as published benchmarks
//                  (FlashAttention's, PyTorch's) draw them with torch.randn; either way query row 1
//                  of head 0 20x larger (a very peaked softmax: the max-subtraction must work); all rounded
//                  to the problem's element type (fp16/bf16: nearest even), so that what a step
//                  gets is what the references and an fp32 previous step get (as float). A KV
//                  cache (AttnParams::kv_cache): the sequences' lengths, and every K/V row past
//                  its sequence's length NaN, so that a step that reads one gives NaN.
//   page_inputs    a paged KV cache (AttnParams::page_size): K and V scattered into a pool of pages through
//                  a shuffled block table, every row of an unused page NaN, then read back through the
//                  table as the references' K and V (the references read what the step reads).
//   DeviceInputs   those inputs on the device in one element type (a step and a previous step
//                  that runs the same type share one copy).
//   Run            one step's device state on one problem: its outputs, its workspace and the
//                  launch arguments; forward()/backward() only launch (for timing),
//                  checked_forward()/checked_backward() NaN-poison the outputs first, launch on
//                  the default stream, wait and raise any error (for checks).
//   run_checked    a Run's checked forward (and backward), its outputs downloaded as float.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "buffer.h"
#include "lowp.h"
#include "ops.h"

namespace fa::attention {

// Elements of Q (and O, dO, dQ); of K (and V, dK, dV); query rows (LSE), over all heads.
inline std::size_t q_elems(const AttnParams& a) { return std::size_t(a.batch) * a.heads * a.seq_q * a.head_dim; }
inline std::size_t k_elems(const AttnParams& a) {
  return std::size_t(a.batch) * kv_heads_of(a) * a.seq_k * a.head_dim;
}
// The K/V head that query head `h` (flattened b·H + h) reads: b·KVH + h / (H / KVH).
inline std::size_t kv_head_of(const AttnParams& a, std::size_t h) {
  const std::size_t H = std::size_t(a.heads), group = H / std::size_t(kv_heads_of(a));
  return h / H * (H / group) + h % H / group;
}
inline std::size_t rows(const AttnParams& a) { return std::size_t(a.batch) * a.heads * a.seq_q; }
// Shapes for compare(): [B, H, seq_q, d], [B, KVH, seq_k, d], [B, H, seq_q].
std::vector<std::size_t> q_shape(const AttnParams& a);
std::vector<std::size_t> k_shape(const AttnParams& a);
std::vector<std::size_t> lse_shape(const AttnParams& a);

// The step's workspace: the larger of its forward's and (with `backward`) its backward's.
std::size_t workspace_bytes(const StepInfo& s, const AttnParams& a, bool backward);

// How make_inputs draws Q, K, V and dO (--inputs): uniform (the checks' default) or standard normal.
enum class InputDist { Uniform, Randn };
const char* input_dist_name(InputDist d);  // "uniform", "randn": the --inputs values

// Host inputs as float (values of a.dtype). dout is drawn only `with_dout` (else empty).
struct Inputs {
  std::vector<float> q, k, v, dout;
  // The O a backward under test is given (its forward's output), or empty: ref_lowp's delta is
  // then rowsum(dO∘O) of that O, as the backward computes it (reference_bwd_rows).
  std::vector<float> o;
  std::vector<int> seq_lens;  // a.kv_cache: the length of each sequence, [batch]; else empty
  // a.page_size > 0 (page_inputs): [batch, max_pages] page indices (-1 where a sequence needs no page), and
  // K and V as pages [num_pages, page_size, KVH, d]; k and v are then what the table reads back.
  std::vector<int> block_table;
  std::vector<float> k_pages, v_pages;
};
// seq_lens (a.kv_cache only; empty: every sequence seq_k long) are checked (check_seq_lens).
Inputs make_inputs(const AttnParams& a, bool with_dout, std::uint64_t seed, std::vector<int> seq_lens = {},
                   InputDist dist = InputDist::Uniform);
// A KV cache's lengths: one per sequence, each in [0, seq_k], and causal needs seq_q <= each
// (the first query would sit before the sequence's start). Throws UsageError saying which.
void check_seq_lens(const AttnParams& a, const std::vector<int>& seq_lens);
// A KV cache's lengths as given, or, where none are given, every sequence seq_k long (the one place
// that rule lives: make_inputs, the paged layout and --input all read it).
std::vector<int> lens_or_full(const AttnParams& a, std::vector<int> seq_lens);
// A paged cache's shape for these lengths: page_size, the pages a sequence needs at most (max_pages, at
// least 1), and the pool (num_pages): the pages all sequences need plus `spare` that no table names.
AttnParams paged_params(AttnParams a, const std::vector<int>& seq_lens, int page_size, int spare = 3);
// A block table that names every page of the pool at most once, in an order drawn from `seed`; -1 past
// the pages a sequence's length needs.
std::vector<int> make_block_table(const AttnParams& a, const std::vector<int>& seq_lens, std::uint64_t seed);
// A page size of at least 1; a table of batch·max_pages entries; enough pages for each length; every
// page a length needs inside the pool. Throws UsageError saying which sequence and page.
void check_paging(const AttnParams& a, const std::vector<int>& seq_lens, const std::vector<int>& block_table);
// in.k, in.v (contiguous, [B, KVH, seq_k, d]) into pages through a table drawn from `seed`; the pool's
// rows that no sequence's length covers NaN; then in.k, in.v read back through the table (NaN past each
// length, as make_inputs leaves them).
void page_inputs(const AttnParams& a, Inputs& in, std::uint64_t seed);
// "5,0,300" -> {5, 0, 300}: a comma-separated list of lengths (--cache-lens, the golden manifest);
// UsageError naming the item that is not an integer.
std::vector<int> parse_seq_lens(const std::string& text);
// Keys sequence b's queries may read: its length (KV cache) or seq_k.
inline int keys_of(const AttnParams& a, const Inputs& in, std::size_t b) {
  return a.kv_cache ? in.seq_lens.at(b) : a.seq_k;
}
// The same problem as MHA: K and V with each K/V head of `a` copied out for every query head of its
// group ([B, H, seq_k, d]); q, dout and o as given. What a grouped-query result must equal.
Inputs repeat_kv_heads(const AttnParams& a, const Inputs& in);

struct DeviceInputs {
  DeviceTensor q, k, v, dout;
  DeviceBuffer<int> seq_lens;  // empty without a KV cache
  DeviceTensor k_pages, v_pages;   // a paged cache: K and V as pages (k, v stay contiguous for a previous step)
  DeviceBuffer<int> block_table;   // empty without pages
  DeviceInputs(DType t, const Inputs& in)
      : q(t, in.q), k(t, in.k), v(t, in.v), dout(t, in.dout), seq_lens(in.seq_lens), k_pages(t, in.k_pages),
        v_pages(t, in.v_pages), block_table(in.block_table) {}
};

struct Run {
  // On inputs already on the device (in a.dtype), or on its own copy of `host` in a.dtype.
  Run(const StepInfo& s, const AttnParams& a, bool backward, const DeviceInputs& shared);
  Run(const StepInfo& s, const AttnParams& a, bool backward, const Inputs& host);

  void forward(cudaStream_t s) { step.attn_fwd(fwd, s); }
  void backward(cudaStream_t s) { step.attn_bwd(bwd, s); }
  void checked_forward();   // O and LSE poisoned, then forward(default stream), synchronized
  void checked_backward();  // dQ, dK and dV poisoned, then backward(default stream), synchronized

  const StepInfo& step;
  std::unique_ptr<DeviceInputs> own;  // set when the inputs are this run's own copy
  const DeviceInputs& in;
  DeviceTensor o;
  DeviceBuffer<float> lse;
  DeviceTensor dq, dk, dv;  // empty without the backward
  DeviceBuffer<char> workspace;
  AttnFwdArgs fwd{};
  AttnBwdArgs bwd{};

 private:
  Run(const StepInfo& s, const AttnParams& a, bool backward, const DeviceInputs* shared, const Inputs* host);
};

// A run's outputs on the host (as float) after one checked launch of each pass; dQ, dK, dV only
// with `backward`. grad(0, 1, 2): dQ, dK, dV.
struct Outputs {
  std::vector<float> o, lse, dq, dk, dv;
  const std::vector<float>* grad(int g) const { return g == 0 ? &dq : g == 1 ? &dk : &dv; }
};
Outputs run_checked(Run& r, bool backward);

}  // namespace fa::attention
