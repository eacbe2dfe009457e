#include "launch.h"

#include <atomic>
#include <cmath>
#include <cstdint>

namespace fa {

namespace {
const char* type_word(DType t) { return t == DType::F32 ? "fp32" : t == DType::F16 ? "fp16" : "bf16"; }
const char* flag_word(DType t) { return t == DType::F32 ? "f32" : t == DType::F16 ? "f16" : "bf16"; }

std::string check_rule(const AttnRule& r, const AttnParams& p) {
  bool type_ok = false;
  for (DType t : r.dtypes) type_ok |= t == p.dtype;
  if (!type_ok) {
    std::string words, flags;
    for (std::size_t i = 0; i < r.dtypes.size(); ++i) {
      words += std::string(i ? "/" : "") + type_word(r.dtypes[i]);
      flags += std::string(i ? " or " : "") + flag_word(r.dtypes[i]);
    }
    return "this step computes in " + words + " only (--dtype " + flags + ")";
  }
  if (r.positive_scale && !(p.scale > 0.f))
    return "the softmax scale must be positive (the row max is taken on unscaled scores)";
  if (p.head_dim > r.max_head_dim || p.head_dim % r.head_dim_multiple != 0)
    return "head_dim must be a multiple of " + std::to_string(r.head_dim_multiple) + " and at most " +
           std::to_string(r.max_head_dim) + " (got " + std::to_string(p.head_dim) + ")";
  const int kvh = kv_heads_of(p);
  if (kvh < 1 || kvh > p.heads || p.heads % kvh != 0)
    return "the query heads (" + std::to_string(p.heads) + ") must be a multiple of the K/V heads (" +
           std::to_string(kvh) + ")";
  if (kvh != p.heads && !r.gqa)
    return "this step runs as many K/V heads as query heads only (no grouped-query attention: --kv-heads " +
           std::to_string(kvh) + " with " + std::to_string(p.heads) + " heads)";
  if (p.kv_cache && !r.kv_cache)
    return "this step runs no KV cache (no per-sequence lengths: --cache-lens)";
  if (p.page_size > 0 && !r.paged) return "this step runs no paged KV cache (--page-size)";
  if (p.page_size > 0 && !p.kv_cache) return "a paged KV cache needs per-sequence lengths (--cache-lens)";
  if (p.page_size < 0 || (p.page_size > 0 && (p.num_pages < 1 || p.max_pages < 1)))
    return "a paged KV cache needs a page size, a page count and pages per sequence of at least 1";
  if (static_cast<long long>(p.batch) * p.heads > r.max_batch_heads)
    return "batch·heads must be at most " + std::to_string(r.max_batch_heads) + " (grid.y)";
  return "";
}
}  // namespace

std::string step_supports(const StepInfo& step, const Problem& p) {
  if (step.family == Family::Attention)
    if (std::string why = check_rule(step.attn_rule, p.attn); !why.empty()) return why;
  return step.supports ? step.supports(p) : "";
}

void check_attention_launch(const StepInfo& step, const AttnParams& p, std::initializer_list<const void*> ptrs,
                            const char* names) {
  Problem pr;
  pr.family = Family::Attention;
  pr.attn = p;
  if (const std::string why = step_supports(step, pr); !why.empty())
    throw UsageError(std::string(step.name) + ": " + why);
  if (p.batch < 1 || p.heads < 1 || p.seq_q < 1 || p.seq_k < 1 || p.head_dim < 1)
    throw UsageError(std::string(step.name) + ": every size must be at least 1");
  for (const void* ptr : ptrs)
    if (reinterpret_cast<std::uintptr_t>(ptr) % 16 != 0)
      throw UsageError(std::string(step.name) + ": " + names + " must be 16-byte aligned (16-byte vector loads)");
}

Problem fa2_problem(int seq, int head_dim, bool causal, DType dtype) {
  Problem p;
  p.family = Family::Attention;
  p.attn.batch = 16384 / seq, p.attn.heads = 2048 / head_dim;
  p.attn.seq_q = p.attn.seq_k = seq, p.attn.head_dim = head_dim;
  p.attn.scale = float(1.0 / std::sqrt(double(head_dim)));
  p.attn.causal = causal;
  p.attn.dtype = dtype;
  return p;
}

namespace {
// One attribute of the current device, asked once per device: 0 without a GPU (or where the query fails).
template <cudaDeviceAttr A>
int cached_attribute() {
  constexpr int kCached = 64;              // devices cached; one beyond them is asked every time
  static std::atomic<int> cache[kCached];  // static storage, zeroed: 0 is "not asked yet"
  int dev = 0, n = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  if (dev >= 0 && dev < kCached)
    if (const int known = cache[dev].load(std::memory_order_relaxed)) return known;
  if (cudaDeviceGetAttribute(&n, A, dev) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  if (dev >= 0 && dev < kCached) cache[dev].store(n, std::memory_order_relaxed);
  return n;
}
}  // namespace

int sm_count() { return cached_attribute<cudaDevAttrMultiProcessorCount>(); }
int l2_bytes() { return cached_attribute<cudaDevAttrL2CacheSize>(); }

void opt_in_shared_memory(const void* kernel, std::size_t bytes, const char* step_name) {
  int dev = 0, optin = 0;
  FA_CUDA_CHECK(cudaGetDevice(&dev));
  FA_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  if (std::size_t(optin) < bytes)
    throw UsageError(std::string(step_name) + " needs " + std::to_string(bytes) +
                     " bytes of shared memory per block; this GPU allows " + std::to_string(optin));
  FA_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
  FA_CUDA_CHECK(
      cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, int(cudaSharedmemCarveoutMaxShared)));
}

}  // namespace fa
