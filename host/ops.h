// ops.h: one launcher signature per op family, so the step main, run_all, the tests and the
// benchmarks treat every step alike. A step's kernel.cu implements one family and describes
// itself with a StepInfo (bottom of this file).
//
// Layout conventions (docs/conventions.md, "Layout"):
//   softmax    x, y   [rows, cols] fp32, row-major, contiguous
//   matmul     C [M, N] = alpha · op(A) · op(B), fp32, every matrix row-major and contiguous:
//              NT: A [M, K], B [N, K], C = alpha·A·Bᵀ     (S = Q·Kᵀ)
//              NN: A [M, K], B [K, N], C = alpha·A·B      (O = P·V)
//              TN: A [K, M], B [K, N], C = alpha·Aᵀ·B     (dV = Pᵀ·dO in the backward)
//              optionally batched: `batch` products, matrices `stride_*` elements apart
//   attention  Q, O [batch, heads, seq_q, head_dim]; K, V [batch, heads, seq_k, head_dim];
//              LSE fp32 [batch, heads, seq_q] (natural log); causal masks key j > query i.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <initializer_list>
#include <string>
#include <vector>

namespace fa {

// ---- softmax --------------------------------------------------------------------------------
struct SoftmaxArgs {
  const float* x;  // [rows, cols]
  float* y;        // [rows, cols]
  int rows;
  int cols;
  float* lse = nullptr;  // optional [rows]: log(sum_j exp(x_j)) per row (-inf for an all -inf row)
};
using SoftmaxLauncher = void (*)(const SoftmaxArgs&, cudaStream_t);

// ---- matmul ---------------------------------------------------------------------------------
enum class MatmulLayout { NT, NN, TN };
struct MatmulArgs {
  const float* A;  // NT, NN: [M, K]   TN: [K, M]
  const float* B;  // NT: [N, K]   NN, TN: [K, N]
  float* C;        // [M, N]
  int M, N, K;
  float alpha;
  MatmulLayout layout;
  int batch = 1;  // independent products; the i-th uses A + i*stride_a, B + i*stride_b, C + i*stride_c
  long long stride_a = 0, stride_b = 0, stride_c = 0;
};
using MatmulLauncher = void (*)(const MatmulArgs&, cudaStream_t);

// ---- attention ------------------------------------------------------------------------------
enum class DType { F32, F16, BF16 };
struct AttnParams {
  int batch = 1, heads = 1, seq_q = 1, seq_k = 1, head_dim = 64;
  // K/V heads (grouped-query attention): 0 means as many as query heads (MHA). Otherwise heads is a
  // multiple of it and query head h reads K/V head h / (heads / kv_heads); 1 is MQA.
  int kv_heads = 0;
  // A KV cache (decoding, step 22): seq_k is the cache's capacity, and sequence b has its own
  // length, 0 <= seq_lens[b] <= seq_k (AttnFwdArgs::seq_lens): keys past it are never read. Causal
  // then aligns each sequence's last query with its last key: query i sits at position
  // len − seq_q + i and sees keys j <= len − seq_q + i. Off: every sequence has seq_k keys, causal
  // top-left.
  bool kv_cache = false;
  // A paged KV cache (step 23; needs kv_cache): page_size > 0 keeps K and V in pages of page_size keys,
  // [num_pages, page_size, kv_heads, head_dim], sequence b's key j in row j % page_size of page
  // block_table[b·max_pages + j / page_size] (AttnFwdArgs::block_table). 0: contiguous.
  int page_size = 0, num_pages = 0, max_pages = 0;
  float scale = 0.125f;  // softmax scale, default 1/sqrt(head_dim)
  bool causal = false;
  DType dtype = DType::F32;
  int variant = 0;  // StepInfo::variants index: a named alternative of the step (0: its default)
};
// The K/V heads of a problem: kv_heads, or heads when it is 0 (MHA).
inline int kv_heads_of(const AttnParams& p) { return p.kv_heads > 0 ? p.kv_heads : p.heads; }
struct AttnFwdArgs {
  AttnParams p;
  const void *q, *k, *v;  // element type p.dtype
  void* o;                // element type p.dtype
  float* lse;             // [batch, heads, seq_q]
  void* workspace;        // StepInfo::fwd_workspace_bytes(p) bytes, may be null if 0
  const int* seq_lens = nullptr;  // p.kv_cache: [batch] int32 on the device, each in [0, seq_k]
  const int* block_table = nullptr;  // p.page_size > 0: [batch, max_pages] int32 on the device (k, v: the pages)
};
struct AttnBwdArgs {
  AttnParams p;
  const void *q, *k, *v, *o, *dout;  // element type p.dtype
  const float* lse;                  // from the forward
  void *dq, *dk, *dv;                // element type p.dtype
  void* workspace;                   // StepInfo::bwd_workspace_bytes(p) bytes, may be null if 0
};
using AttnFwdLauncher = void (*)(const AttnFwdArgs&, cudaStream_t);
using AttnBwdLauncher = void (*)(const AttnBwdArgs&, cudaStream_t);

// ---- a problem of any family, as the CLI and run_all describe it ---------------------------
enum class Family { Softmax, Matmul, Attention };
struct Problem {
  Family family = Family::Softmax;
  long long rows = 0, cols = 0;   // softmax
  long long M = 0, N = 0, K = 0;  // matmul
  long long batch = 1;
  MatmulLayout layout = MatmulLayout::NN;
  AttnParams attn;               // attention
  bool backward = false;         // attention: also run the backward
  std::string describe() const;  // "16384x16384", "B4 H16 S4096 D64 causal f16"
};

// ---- what a step tells the harness about itself ---------------------------------------------
// What an attention step runs, declared once: step_supports() (host/launch.h) turns it into the
// reason a problem is refused, and the step's --help lists only these element types.
struct AttnRule {
  std::vector<DType> dtypes{DType::F32};  // the element types it runs; the first is its default
  int max_head_dim = 128;                 // head_dim in [1, max_head_dim] ...
  int head_dim_multiple = 4;              // ... and a multiple of this (the kernels' vector width)
  long long max_batch_heads = 65535;      // batch·heads is grid.y
  bool positive_scale = false;            // the row max is taken on unscaled scores
  bool gqa = false;                       // runs fewer K/V heads than query heads (GQA, MQA)
  bool kv_cache = false;                  // runs a KV cache with a length per sequence (AttnParams::kv_cache)
  bool paged = false;                     // runs a paged KV cache (AttnParams::page_size)
};

struct StepInfo {
  const char* name;  // "02_online_softmax": folder, executable and table name
  const char* idea;  // one line: what this step adds
  Family family;
  SoftmaxLauncher softmax = nullptr;
  MatmulLauncher matmul = nullptr;
  AttnFwdLauncher attn_fwd = nullptr;
  AttnBwdLauncher attn_bwd = nullptr;
  AttnRule attn_rule;  // attention steps: element types and head_dim rule
  std::vector<std::string> variants;  // named alternatives (--variant NAME); the first is the default
  // Beyond attn_rule: "" if the step can run the problem, else the reason, shown verbatim. May
  // be null. Callers ask step_supports(), which applies attn_rule first.
  std::string (*supports)(const Problem&) = nullptr;
  std::size_t (*fwd_workspace_bytes)(const AttnParams&) = nullptr;
  std::size_t (*bwd_workspace_bytes)(const AttnParams&) = nullptr;
  const char* workspace_note = nullptr;  // what the workspace holds, for "needs N GiB" messages
  // This step's default problem (run_all, and the executable without shape flags); null: the
  // family's default (attention: in attn_rule's first element type).
  Problem (*default_problem)() = nullptr;
  // This step's benchmark shapes (--sweep) if not the family's (attention: the FA2 shapes).
  std::vector<Problem> (*sweep)() = nullptr;
  // The GPU the step's kernels are built for, as major·10 + minor (90: Hopper, sm_90a kernels);
  // 0: any GPU the build targets. On another GPU the executable says so and exits with
  // kExitWrongDevice, and the step's GPU tests skip with that reason.
  int needs_cc = 0;
};

}  // namespace fa
