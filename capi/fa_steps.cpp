// fa_steps.cpp: the C ABI of fa_steps.h over the steps' StepInfo. Each call checks its arguments
// with the step's own rule (fa::check_attention_launch, host/launch.h) before it asks for a device,
// then calls the step's launcher; an exception becomes a status code and this thread's message.
#include "fa_steps.h"

#include <cstring>
#include <map>
#include <mutex>
#include <new>
#include <string>
#include <vector>

#include "check.h"
#include "device_check.h"  // harness/: the same needs_cc test as the step executables
#include "launch.h"
#include "ops.h"
#include "steps_list.h"  // generated: every step of the build, in order, with its PREV

namespace {

thread_local std::string t_error;

const std::vector<fa::StepAndPrev>& steps() {
  static const std::vector<fa::StepAndPrev> s = all_steps();
  return s;
}

const fa::StepInfo& step_at(int index) {
  if (index < 0 || index >= int(steps().size()))
    throw fa::UsageError("no step with index " + std::to_string(index) + " (this library has " +
                         std::to_string(steps().size()) + ")");
  return *steps()[std::size_t(index)].step;
}

// Runs `body`, turning what it throws into a status and this thread's message.
template <class F>
int guarded(F&& body) {
  t_error.clear();
  try {
    body();
    return FA_OK;
  } catch (const fa::UsageError& e) {
    t_error = e.what();
    return FA_ERR_USAGE;
  } catch (const fa::Error& e) {  // fa::CudaError and the launchers' other run-time failures
    t_error = e.what();
    return FA_ERR_CUDA;
  } catch (const std::bad_alloc&) {
    t_error = "out of host memory";
  } catch (const std::exception& e) {
    t_error = e.what();
  } catch (...) {
    t_error = "unknown error";
  }
  return FA_ERR_INTERNAL;
}

// A status that is not an exception: the message and its code.
struct Refusal {
  int code;
  std::string why;
};

// A paged cache's shape (the fa_*_paged calls' arguments); all 0: a contiguous cache.
struct Paging {
  int page_size = 0, num_pages = 0, max_pages = 0;
};

fa::AttnParams params_of(const fa_attn_params* c, bool kv_cache, Paging pages = {}) {
  if (!c) throw fa::UsageError("the problem (fa_attn_params) is null");
  if (c->dtype < FA_F32 || c->dtype > FA_BF16)
    throw fa::UsageError("dtype " + std::to_string(c->dtype) + " is not one of 0 (fp32), 1 (fp16), 2 (bf16)");
  fa::AttnParams p;
  p.batch = c->batch, p.heads = c->heads, p.kv_heads = c->kv_heads;
  p.seq_q = c->seq_q, p.seq_k = c->seq_k, p.head_dim = c->head_dim;
  p.dtype = static_cast<fa::DType>(c->dtype);
  p.causal = c->causal != 0;
  p.scale = c->scale;
  p.variant = c->variant;
  p.kv_cache = kv_cache;
  p.page_size = pages.page_size, p.num_pages = pages.num_pages, p.max_pages = pages.max_pages;
  return p;
}

// The steps of this library that have what `has` asks, as "07, 08 and 16" for a refusal.
template <class Pred>
std::string steps_with(Pred has) {
  std::vector<std::string> names;
  for (const fa::StepAndPrev& s : steps())
    if (has(*s.step)) names.push_back(s.step->name);
  std::string out;
  for (std::size_t i = 0; i < names.size(); ++i)
    out += (i == 0 ? "" : i + 1 == names.size() ? " and " : ", ") + names[i];
  return names.empty() ? "none in this library" : out;
}

bool runs_contiguous_decode(const fa::StepInfo& t) { return t.attn_fwd && t.attn_rule.kv_cache && !t.attn_rule.paged; }
bool runs_paged_decode(const fa::StepInfo& t) { return t.attn_fwd && t.attn_rule.paged; }

// What every call of `direction` checks first, without a device: the step has that launcher (a paged
// call, `paged`, only on a step that reads a paged cache, and such a step through no other call), and
// its rule (dtypes, head_dim, GQA, sizes, the pages' shape, its supports()) takes the problem; the
// variant exists.
void check_problem(const fa::StepInfo& s, const fa::AttnParams& p, int direction, bool paged = false) {
  if (direction < FA_FORWARD || direction > FA_DECODE)
    throw fa::UsageError("direction " + std::to_string(direction) + " is not 0 (forward), 1 (backward), 2 (decode)");
  if (s.family != fa::Family::Attention) throw fa::UsageError(std::string(s.name) + ": not an attention step");
  // A paged step's launcher reads K and V through the block table and refuses a contiguous cache (step
  // 23's supports()): said here in this ABI's terms rather than its command line's.
  if (s.attn_rule.paged && !paged)
    throw fa::UsageError(std::string(s.name) + ": reads a paged KV cache only: call fa_decode_paged (fa_decode, a "
                         "contiguous cache: " + steps_with(runs_contiguous_decode) + ")");
  if (paged && !runs_paged_decode(s))
    throw fa::UsageError(std::string(s.name) + ": runs no paged KV cache (fa_decode_paged: " +
                         steps_with(runs_paged_decode) + ")" +
                         (runs_contiguous_decode(s) ? "; it reads a contiguous one through fa_decode" : ""));
  // The rule below reads page_size 0 as a contiguous cache, which a paged call cannot mean.
  if (paged && p.page_size == 0)
    throw fa::UsageError(std::string(s.name) + ": a paged KV cache needs a page size of at least 1 (got 0)");
  if (direction == FA_BACKWARD && !s.attn_bwd)
    throw fa::UsageError(std::string(s.name) + ": has no backward (steps with one: " +
                         steps_with([](const fa::StepInfo& t) { return t.attn_bwd != nullptr; }) + ")");
  if (direction == FA_DECODE && !s.attn_rule.kv_cache)
    throw fa::UsageError(std::string(s.name) + ": runs no KV cache (decode: " + steps_with(runs_contiguous_decode) +
                         "; paged: " + steps_with(runs_paged_decode) + ")");
  const int n_variants = s.variants.empty() ? 1 : int(s.variants.size());
  if (p.variant < 0 || p.variant >= n_variants)
    throw fa::UsageError(std::string(s.name) + ": no variant " + std::to_string(p.variant) + " (it has " +
                         std::to_string(n_variants) + ")");
  fa::check_attention_launch(s, p, {}, "");
  // The lengths are on the device, so only their bound, seq_k, can be held to what the table reaches:
  // with seq_k past it, a length the contract allows would read past its sequence's row of the table.
  if (paged && static_cast<long long>(p.seq_k) > static_cast<long long>(p.max_pages) * p.page_size)
    throw fa::UsageError(std::string(s.name) + ": seq_k (" + std::to_string(p.seq_k) +
                         ", the capacity) must be at most max_pages·page_size = " + std::to_string(p.max_pages) +
                         "·" + std::to_string(p.page_size) + " (the keys a row of the block table reaches)");
}

std::size_t workspace_of(const fa::StepInfo& s, const fa::AttnParams& p, int direction) {
  const auto size = direction == FA_BACKWARD ? s.bwd_workspace_bytes : s.fwd_workspace_bytes;
  return size ? size(p) : 0;
}

// A pointer a launch takes: named for the refusals, and whether the step's loads need it 16-byte
// aligned (the tensors; not LSE or the lengths).
struct Ptr {
  const void* ptr;
  const char* name;
  bool aligned = true;
};

// The problem (check_problem), then each pointer: there (the kernels would fault on null), and
// aligned as check_attention_launch requires; then the workspace.
void check_launch(const fa::StepInfo& s, const fa::AttnParams& p, int direction, std::initializer_list<Ptr> ptrs,
                  const void* workspace, std::size_t workspace_bytes, bool paged = false) {
  check_problem(s, p, direction, paged);
  for (const Ptr& x : ptrs) {
    if (!x.ptr) throw fa::UsageError(std::string(s.name) + ": " + x.name + " is null");
    if (x.aligned) fa::check_attention_launch(s, p, {x.ptr}, x.name);
  }
  const std::size_t need = workspace_of(s, p, direction);
  if (need > 0 && (!workspace || workspace_bytes < need))
    throw fa::UsageError(std::string(s.name) + ": needs a workspace of " + std::to_string(need) + " bytes (" +
                         (s.workspace_note ? s.workspace_note : "") + "); given " +
                         (workspace ? std::to_string(workspace_bytes) + " bytes" : std::string("none")));
}

// fa::device_cc(dev), asked once per device: every launch of a step with needs_cc checks it, and
// cudaGetDeviceProperties takes far longer than a launch.
fa::DeviceCC device_cc_cached(int dev) {
  static std::mutex m;
  static std::map<int, fa::DeviceCC> known;
  const std::lock_guard<std::mutex> lock(m);
  auto it = known.find(dev);
  if (it == known.end()) it = known.emplace(dev, fa::device_cc(dev)).first;
  return it->second;
}

// "" when the current device can run `s`, else the refusal (no device; a GPU of another kind).
Refusal device_refusal(const fa::StepInfo& s) {
  int n = 0;
  const cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess || n == 0) {
    cudaGetLastError();
    return {FA_ERR_NO_DEVICE, std::string("no usable CUDA device (") +
                                  (err != cudaSuccess ? cudaGetErrorString(err) : "the driver sees none") +
                                  "): the steps need an NVIDIA GPU of compute capability 8.0 or more and its driver"};
  }
  if (s.needs_cc == 0) return {FA_OK, ""};
  int dev = 0;
  FA_CUDA_CHECK(cudaGetDevice(&dev));
  const std::string why = fa::wrong_device_message(s.name, s.needs_cc, device_cc_cached(dev));
  return {why.empty() ? FA_OK : FA_ERR_WRONG_DEVICE, why};
}

// After the argument checks: the device, then the launch.
template <class Launch>
int launch_on_device(const fa::StepInfo& s, Launch&& launch) {
  Refusal r{FA_OK, ""};
  if (const int code = guarded([&] { r = device_refusal(s); }); code != FA_OK) return code;
  if (r.code != FA_OK) {
    t_error = r.why;
    return r.code;
  }
  return guarded(launch);
}

}  // namespace

extern "C" {

int fa_abi_version(void) { return FA_ABI_VERSION; }

const char* fa_last_error(void) { return t_error.c_str(); }

int fa_step_count(void) { return int(steps().size()); }

int fa_step_find(const char* name, int* index) {
  return guarded([&] {
    if (!name || !index) throw fa::UsageError("fa_step_find: null argument");
    const std::string want = name;
    for (std::size_t i = 0; i < steps().size(); ++i) {
      const std::string have = steps()[i].step->name;
      if (have == want || (want.size() == 2 && have.compare(0, 2, want) == 0)) {
        *index = int(i);
        return;
      }
    }
    std::string known;
    for (const fa::StepAndPrev& s : steps()) known += std::string(known.empty() ? "" : ", ") + s.step->name;
    throw fa::UsageError("unknown step '" + want + "' (this library has " + known + ")");
  });
}

int fa_step_info_get(int index, fa_step_info* out) {
  return guarded([&] {
    const fa::StepInfo& s = step_at(index);
    if (!out) throw fa::UsageError("fa_step_info_get: null output");
    const fa::StepInfo* prev = steps()[std::size_t(index)].prev;
    fa_step_info i{};
    i.name = s.name;
    i.idea = s.idea;
    i.prev = prev ? prev->name : "";
    i.workspace_note = s.workspace_note ? s.workspace_note : "";
    i.family = int(s.family);
    const bool attn = s.family == fa::Family::Attention;
    i.has_forward = attn && s.attn_fwd && !s.attn_rule.paged;  // a paged step: fa_decode_paged only
    i.has_backward = attn && s.attn_bwd;
    i.has_decode = attn && runs_contiguous_decode(s);
    i.has_paged_decode = attn && runs_paged_decode(s);
    i.needs_cc = s.needs_cc;
    if (attn) {
      for (fa::DType t : s.attn_rule.dtypes)
        if (i.n_dtypes < 3) i.dtypes[i.n_dtypes++] = int(t);
      i.max_head_dim = s.attn_rule.max_head_dim;
      i.head_dim_multiple = s.attn_rule.head_dim_multiple;
      i.positive_scale = s.attn_rule.positive_scale;
      i.gqa = s.attn_rule.gqa;
      i.max_batch_heads = s.attn_rule.max_batch_heads;
    }
    i.n_variants = int(s.variants.size());
    *out = i;
  });
}

const char* fa_step_variant(int index, int variant) {
  if (index < 0 || index >= int(steps().size())) return nullptr;
  const fa::StepInfo& s = *steps()[std::size_t(index)].step;
  return variant >= 0 && variant < int(s.variants.size()) ? s.variants[std::size_t(variant)].c_str() : nullptr;
}

int fa_device(int* cc, char* name, size_t name_size) {
  Refusal r{FA_OK, ""};
  static const fa::StepInfo any{"", "", fa::Family::Attention};  // needs_cc 0: only "is there a device"
  if (const int code = guarded([&] { r = device_refusal(any); }); code != FA_OK) return code;
  if (r.code != FA_OK) {
    t_error = r.why;
    return r.code;
  }
  return guarded([&] {
    int dev = 0;
    FA_CUDA_CHECK(cudaGetDevice(&dev));
    const fa::DeviceCC d = fa::device_cc(dev);
    if (cc) *cc = d.cc;
    if (name && name_size > 0) {
      std::strncpy(name, d.name.c_str(), name_size - 1);
      name[name_size - 1] = '\0';
    }
  });
}

int fa_step_runs_here(int index) {
  const fa::StepInfo* s = nullptr;
  if (const int code = guarded([&] { s = &step_at(index); }); code != FA_OK) return code;
  return launch_on_device(*s, [] {});
}

int fa_check(int index, const fa_attn_params* p, int direction) {
  return guarded([&] { check_problem(step_at(index), params_of(p, direction == FA_DECODE), direction); });
}

int fa_workspace_size(int index, const fa_attn_params* p, int direction, size_t* bytes) {
  return guarded([&] {
    if (!bytes) throw fa::UsageError("fa_workspace_size: null output");
    const fa::StepInfo& s = step_at(index);
    const fa::AttnParams a = params_of(p, direction == FA_DECODE);
    check_problem(s, a, direction);
    *bytes = workspace_of(s, a, direction);
  });
}

int fa_check_paged(int index, const fa_attn_params* p, int page_size, int num_pages, int max_pages) {
  return guarded([&] {
    check_problem(step_at(index), params_of(p, true, {page_size, num_pages, max_pages}), FA_DECODE, true);
  });
}

int fa_workspace_size_paged(int index, const fa_attn_params* p, int page_size, int num_pages, int max_pages,
                            size_t* bytes) {
  return guarded([&] {
    if (!bytes) throw fa::UsageError("fa_workspace_size_paged: null output");
    const fa::StepInfo& s = step_at(index);
    const fa::AttnParams a = params_of(p, true, {page_size, num_pages, max_pages});
    check_problem(s, a, FA_DECODE, true);
    *bytes = workspace_of(s, a, FA_DECODE);
  });
}

int fa_forward(int index, const fa_attn_params* p, const void* q, const void* k, const void* v, void* o, float* lse,
               void* workspace, size_t workspace_bytes, void* stream) {
  const fa::StepInfo* s = nullptr;
  fa::AttnFwdArgs a{};
  const int code = guarded([&] {
    s = &step_at(index);
    a = {params_of(p, false), q, k, v, o, lse, workspace, nullptr};
    check_launch(*s, a.p, FA_FORWARD, {{q, "Q"}, {k, "K"}, {v, "V"}, {o, "O"}, {lse, "LSE", false}}, workspace,
                 workspace_bytes);
  });
  if (code != FA_OK) return code;
  return launch_on_device(*s, [&] { s->attn_fwd(a, static_cast<cudaStream_t>(stream)); });
}

int fa_decode(int index, const fa_attn_params* p, const void* q, const void* k_cache, const void* v_cache,
              const int* cache_seqlens, void* o, float* lse, void* workspace, size_t workspace_bytes, void* stream) {
  const fa::StepInfo* s = nullptr;
  fa::AttnFwdArgs a{};
  const int code = guarded([&] {
    s = &step_at(index);
    a = {params_of(p, true), q, k_cache, v_cache, o, lse, workspace, cache_seqlens};
    check_launch(*s, a.p, FA_DECODE,
                 {{q, "Q"},
                  {k_cache, "the K cache"},
                  {v_cache, "the V cache"},
                  {cache_seqlens, "cache_seqlens", false},
                  {o, "O"},
                  {lse, "LSE", false}},
                 workspace, workspace_bytes);
  });
  if (code != FA_OK) return code;
  return launch_on_device(*s, [&] { s->attn_fwd(a, static_cast<cudaStream_t>(stream)); });
}

int fa_decode_paged(int index, const fa_attn_params* p, int page_size, int num_pages, int max_pages, const void* q,
                    const void* k_pages, const void* v_pages, const int* block_table, const int* cache_seqlens, void* o,
                    float* lse, void* workspace, size_t workspace_bytes, void* stream) {
  const fa::StepInfo* s = nullptr;
  fa::AttnFwdArgs a{};
  const int code = guarded([&] {
    s = &step_at(index);
    a = {params_of(p, true, {page_size, num_pages, max_pages}), q, k_pages, v_pages, o, lse, workspace, cache_seqlens,
         block_table};
    check_launch(*s, a.p, FA_DECODE,
                 {{q, "Q"},
                  {k_pages, "the K pages"},
                  {v_pages, "the V pages"},
                  {block_table, "block_table", false},
                  {cache_seqlens, "cache_seqlens", false},
                  {o, "O"},
                  {lse, "LSE", false}},
                 workspace, workspace_bytes, true);
  });
  if (code != FA_OK) return code;
  return launch_on_device(*s, [&] { s->attn_fwd(a, static_cast<cudaStream_t>(stream)); });
}

int fa_backward(int index, const fa_attn_params* p, const void* q, const void* k, const void* v, const void* o,
                const void* dout, const float* lse, void* dq, void* dk, void* dv, void* workspace,
                size_t workspace_bytes, void* stream) {
  const fa::StepInfo* s = nullptr;
  fa::AttnBwdArgs a{};
  const int code = guarded([&] {
    s = &step_at(index);
    a = {params_of(p, false), q, k, v, o, dout, lse, dq, dk, dv, workspace};
    check_launch(
        *s, a.p, FA_BACKWARD,
        {{q, "Q"}, {k, "K"}, {v, "V"}, {o, "O"}, {dout, "dO"}, {lse, "LSE", false}, {dq, "dQ"}, {dk, "dK"}, {dv, "dV"}},
        workspace, workspace_bytes);
  });
  if (code != FA_OK) return code;
  return launch_on_device(*s, [&] { s->attn_bwd(a, static_cast<cudaStream_t>(stream)); });
}

}  // extern "C"
