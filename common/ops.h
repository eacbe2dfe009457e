// ops.h: one launcher signature per op family, so the step main, run_all, the tests and the
// benchmarks treat every step alike. A step's kernel.cu implements one family and describes
// itself with a StepInfo (bottom of this file).
//
// Layout conventions (DESIGN §2):
//   softmax    x, y   [rows, cols] fp32, row-major, contiguous
//   matmul     A [M, K]; B [N, K] (NT: C = alpha·A·Bᵀ) or B [K, N] (NN: C = alpha·A·B); C [M, N]; fp32
//   attention  Q, O [batch, heads, seq_q, head_dim]; K, V [batch, heads, seq_k, head_dim];
//              LSE fp32 [batch, heads, seq_q] (natural log); causal masks key j > query i.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <string>

namespace fa {

// ---- softmax --------------------------------------------------------------------------------
struct SoftmaxArgs {
  const float* x;  // [rows, cols]
  float* y;        // [rows, cols]
  int rows;
  int cols;
};
using SoftmaxLauncher = void (*)(const SoftmaxArgs&, cudaStream_t);

// ---- matmul ---------------------------------------------------------------------------------
enum class MatmulLayout { NT, NN };
struct MatmulArgs {
  const float* A;  // [M, K]
  const float* B;  // NT: [N, K]   NN: [K, N]
  float* C;        // [M, N]
  int M, N, K;
  float alpha;
  MatmulLayout layout;
};
using MatmulLauncher = void (*)(const MatmulArgs&, cudaStream_t);

// ---- attention ------------------------------------------------------------------------------
enum class DType { F32, F16, BF16 };
struct AttnParams {
  int batch = 1, heads = 1, seq_q = 1, seq_k = 1, head_dim = 64;
  float scale = 0.125f;  // softmax scale, default 1/sqrt(head_dim)
  bool causal = false;
  DType dtype = DType::F32;
};
struct AttnFwdArgs {
  AttnParams p;
  const void *q, *k, *v;  // element type p.dtype
  void* o;                // element type p.dtype
  float* lse;             // [batch, heads, seq_q]
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
  MatmulLayout layout = MatmulLayout::NT;
  AttnParams attn;               // attention
  bool backward = false;         // attention: also run the backward
  std::string describe() const;  // "16384x16384", "B4 H16 S4096 D64 causal f16"
};

// ---- what a step tells the harness about itself ---------------------------------------------
struct StepInfo {
  const char* name;  // "02_online_softmax": folder, executable and table name
  const char* idea;  // one line: what this step adds
  Family family;
  SoftmaxLauncher softmax = nullptr;
  MatmulLauncher matmul = nullptr;
  AttnFwdLauncher attn_fwd = nullptr;
  AttnBwdLauncher attn_bwd = nullptr;
  // "" if the step can run the problem, else the reason, shown to the user verbatim.
  std::string (*supports)(const Problem&) = nullptr;
  std::size_t (*bwd_workspace_bytes)(const AttnParams&) = nullptr;
};

}  // namespace fa
