// =============================================================================================
// FlashAttention from scratch, step by step, in CUDA C++
// Step 04: naive (standard) attention, forward and backward, with S and P in device memory
//
//   forward    S = scale · Q·Kᵀ            step 03's matmul (NT), one product per (batch, head)
//              S_ij = -inf where j > i      (causal only) a masking kernel
//              P = softmax(S), LSE          step 02's online softmax, row by row
//              O = P·V                      step 03's matmul (NN)
//
//   backward   S, P recomputed as above     (nothing but Q, K, V, O, dO and LSE is kept)
//              dV = Pᵀ·dO                   matmul (TN)
//              dP = dO·Vᵀ                   matmul (NT)
//              delta_i = rowsum(dO_i ∘ O_i) a row kernel
//              dS = P ∘ (dP - delta)        an element-wise kernel (in place over dP)
//              dQ = scale · dS·K            matmul (NN)
//              dK = scale · dSᵀ·Q           matmul (TN)
//
// What this step adds: attention itself, assembled from the two ideas before it. Nothing is
// fused: S and P ([batch, heads, seq_q, seq_k] fp32 each) go through device memory, so the
// bytes grow with seq² and the step refuses problems whose S and P do not fit. It is the
// baseline the flash steps (05+) must beat, so every piece is the best the series has so far.
//
// Build + run:  cmake --build build --target 04_naive_attention && build/bin/04_naive_attention
// Read with:    docs/04_naive_attention.md
// =============================================================================================
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>

#include "check.h"
#include "launch.h"
#include "ops.h"

namespace step02 {
const fa::StepInfo& info();
}  // namespace step02
namespace step03 {
const fa::StepInfo& info();
}  // namespace step03

namespace step04 {

// ---- the two memory-bound helpers the library steps do not provide -----------------------------
// Causal mask: S[r, j] = -inf for every key j > query i, row r = (b·H + h)·seq_q + i.
// grid: one block per query row; the block walks the masked tail of its row.
__global__ void mask_future_keys(float* __restrict__ s, int seq_q, int seq_k) {
  const int i = blockIdx.x % seq_q;  // query index within its head
  float* row = s + size_t(blockIdx.x) * seq_k;
  for (int j = i + 1 + threadIdx.x; j < seq_k; j += blockDim.x) row[j] = -INFINITY;
}

// delta_i = sum_d dO[i, d] · O[i, d]: one warp per row of [rows, head_dim].
__global__ void row_dot(const float* __restrict__ dout, const float* __restrict__ o, float* __restrict__ delta,
                        long long rows, int head_dim) {
  const long long row = (long long)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  if (row >= rows) return;
  const int lane = threadIdx.x % 32;
  float acc = 0.f;
  for (int d = lane; d < head_dim; d += 32) acc += dout[row * head_dim + d] * o[row * head_dim + d];
  for (int offset = 16; offset > 0; offset /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, offset);
  if (lane == 0) delta[row] = acc;
}

// dS = P ∘ (dP - delta_row), written over dP. [rows, seq_k], grid-stride.
__global__ void softmax_grad(const float* __restrict__ p, float* __restrict__ dp_ds, const float* __restrict__ delta,
                             long long elems, int seq_k) {
  for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < elems;
       e += (long long)gridDim.x * blockDim.x)
    dp_ds[e] = p[e] * (dp_ds[e] - delta[e / seq_k]);
}

// ---- workspace -----------------------------------------------------------------------------------
// [batch, heads, seq_q, seq_k] fp32: the matrix that makes this step "naive".
size_t score_elems(const fa::AttnParams& p) { return size_t(p.batch) * p.heads * p.seq_q * p.seq_k; }
size_t rows_of(const fa::AttnParams& p) { return size_t(p.batch) * p.heads * p.seq_q; }
size_t fwd_workspace(const fa::AttnParams& p) { return 2 * score_elems(p) * sizeof(float); }  // S, P
size_t bwd_workspace(const fa::AttnParams& p) {
  return 2 * score_elems(p) * sizeof(float) + rows_of(p) * sizeof(float);  // P, dP/dS, delta
}

// ---- building blocks -------------------------------------------------------------------------------
// One batched product per (batch, head): C[bh] = alpha · op(A[bh]) · op(B[bh]).
void matmul(const float* A, const float* B, float* C, int M, int N, int K, float alpha, fa::MatmulLayout layout,
            const fa::AttnParams& p, cudaStream_t s) {
  fa::MatmulArgs m{A, B, C, M, N, K, alpha, layout};
  m.batch = p.batch * p.heads;
  // Row-major blocks per head: op(A) is M×K, op(B) is K×N, C is M×N, whatever the layout.
  m.stride_a = (long long)M * K, m.stride_b = (long long)K * N, m.stride_c = (long long)M * N;
  step03::info().matmul(m, s);
}

// S = scale·Q·Kᵀ, masked if causal, then P = softmax(S) and LSE, all in device memory.
void scores_and_probs(const fa::AttnParams& p, const float* q, const float* k, float* S, float* P, float* lse,
                      cudaStream_t s) {
  matmul(q, k, S, p.seq_q, p.seq_k, p.head_dim, p.scale, fa::MatmulLayout::NT, p, s);  // [BH, Sq, Sk]
  if (p.causal) {
    mask_future_keys<<<unsigned(rows_of(p)), 256, 0, s>>>(S, p.seq_q, p.seq_k);
    FA_CHECK_LAUNCH();
  }
  step02::info().softmax({S, P, int(rows_of(p)), p.seq_k, lse}, s);  // rows of P; LSE per row
}

void check_supported(const fa::AttnParams& p) {
  if (p.dtype != fa::DType::F32) throw fa::UsageError("04_naive_attention computes in fp32 only (--dtype f32)");
  if (size_t(p.batch) * p.heads > 65535) throw fa::UsageError("batch·heads must be at most 65535");
}

void forward(const fa::AttnFwdArgs& a, cudaStream_t s) {
  const fa::AttnParams& p = a.p;
  check_supported(p);
  float* S = static_cast<float*>(a.workspace);  // [BH, Sq, Sk]
  float* P = S + score_elems(p);                // [BH, Sq, Sk]
  const float *q = static_cast<const float*>(a.q), *k = static_cast<const float*>(a.k),
              *v = static_cast<const float*>(a.v);
  scores_and_probs(p, q, k, S, P, a.lse, s);
  matmul(P, v, static_cast<float*>(a.o), p.seq_q, p.head_dim, p.seq_k, 1.f, fa::MatmulLayout::NN, p, s);  // O = P·V
}

void backward(const fa::AttnBwdArgs& a, cudaStream_t s) {
  const fa::AttnParams& p = a.p;
  check_supported(p);
  float* P = static_cast<float*>(a.workspace);  // [BH, Sq, Sk]
  float* dS = P + score_elems(p);               // [BH, Sq, Sk]: S first, then dP, then dS
  float* delta = dS + score_elems(p);           // [BH, Sq]
  const float *q = static_cast<const float*>(a.q), *k = static_cast<const float*>(a.k),
              *v = static_cast<const float*>(a.v), *o = static_cast<const float*>(a.o),
              *dout = static_cast<const float*>(a.dout);
  float *dq = static_cast<float*>(a.dq), *dk = static_cast<float*>(a.dk), *dv = static_cast<float*>(a.dv);

  scores_and_probs(p, q, k, dS, P, nullptr, s);  // the forward's P again (its LSE is a.lse already)
  matmul(P, dout, dv, p.seq_k, p.head_dim, p.seq_q, 1.f, fa::MatmulLayout::TN, p, s);  // dV = Pᵀ·dO
  matmul(dout, v, dS, p.seq_q, p.seq_k, p.head_dim, 1.f, fa::MatmulLayout::NT, p, s);  // dP = dO·Vᵀ
  const long long rows = (long long)rows_of(p);
  row_dot<<<unsigned((rows + 7) / 8), 256, 0, s>>>(dout, o, delta, rows, p.head_dim);  // delta
  FA_CHECK_LAUNCH();
  const long long elems = (long long)score_elems(p);
  softmax_grad<<<unsigned(std::min<long long>((elems + 255) / 256, 1 << 20)), 256, 0, s>>>(P, dS, delta, elems,
                                                                                           p.seq_k);  // dS
  FA_CHECK_LAUNCH();
  matmul(dS, k, dq, p.seq_q, p.head_dim, p.seq_k, p.scale, fa::MatmulLayout::NN, p, s);  // dQ = scale·dS·K
  matmul(dS, q, dk, p.seq_k, p.head_dim, p.seq_q, p.scale, fa::MatmulLayout::TN, p, s);  // dK = scale·dSᵀ·Q
}

const fa::StepInfo& info() {
  static const fa::StepInfo i = [] {
    fa::StepInfo s{"04_naive_attention", "standard attention: S and P materialised, matmul + softmax + matmul",
                   fa::Family::Attention};
    s.attn_fwd = forward;
    s.attn_bwd = backward;
    s.attn_rule.max_head_dim = 1024, s.attn_rule.head_dim_multiple = 1;  // any head_dim the CLI allows
    s.fwd_workspace_bytes = fwd_workspace;
    s.bwd_workspace_bytes = bwd_workspace;
    s.workspace_note = "S and P, batch·heads·seq_q·seq_k fp32 each";
    return s;
  }();
  return i;
}

}  // namespace step04
