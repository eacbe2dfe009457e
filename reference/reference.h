// reference.h: fp64 CPU references for every op family of the series (pure C++, no CUDA).
//
// These are the ground truth the GPU steps are checked against, and they are themselves
// checked against NumPy golden data (tests/test_reference.cpp, tests/data/). Plain loops,
// fp64 accumulation, written to be read.
//
// Conventions (docs/conventions.md, "Layout"), followed exactly by every GPU kernel:
//   softmax    y = exp(x - max) / sum, per row. A row that is all -inf attends to nothing and
//              gives all zeros (not NaN); a -inf entry in an otherwise finite row gives 0; any
//              NaN or +inf in a row makes the whole row NaN (never a silently wrong number).
//   matmul     A [M, K]; B [N, K] with C = alpha·A·Bᵀ (b_is_nk, "NT") or B [K, N] with
//              C = alpha·A·B ("NN"); C [M, N]; all row-major.
//   attention  Q, O [batch, heads, seq_q, head_dim]; K, V [batch, heads, seq_k, head_dim];
//              S = Q·Kᵀ·scale; causal masks key j > query i (top-left aligned, as PyTorch's
//              is_causal); P = softmax(S) (convention above); O = P·V;
//              LSE [batch, heads, seq_q] = log(sum_j exp(S_ij)) (natural log), -inf for a row
//              with no visible key (its O row is 0 and it gets no gradient).
//   low precision  attention_forward_rows and attention_backward_*_rows with a rounding
//              function: the same math done by a simple fp16/bf16 implementation (the ref_lowp
//              of the fp16/bf16 tolerance, harness/tolerance.h). The rounding is passed in, so
//              this library stays pure C++.
#pragma once

namespace ref {

// x, y: [rows, cols], row-major. y may alias x.
void softmax(const double* x, double* y, long long rows, long long cols);

// b_is_nk: B is [N, K] and C = alpha·A·Bᵀ; otherwise B is [K, N] and C = alpha·A·B.
void matmul(const double* A, const double* B, double* C, int M, int N, int K, double alpha, bool b_is_nk);

struct AttnShape {
  int batch, heads, seq_q, seq_k, head_dim;
  double scale;  // usually 1/sqrt(head_dim)
  bool causal;
  // Causal: query i sees keys j <= i + causal_offset. 0: top-left (PyTorch's is_causal); seq_k −
  // seq_q: bottom-right, the last query with the last key (a KV cache, fa::AttnParams::kv_cache).
  int causal_offset = 0;
};

// o: [batch, heads, seq_q, head_dim]; lse: [batch, heads, seq_q].
void attention_forward(const AttnShape&, const double* q, const double* k, const double* v, double* o, double* lse);

// Rounds a value to a low-precision type (nearest even), returned as double: fa::round_to.
using Rounding = double (*)(double);

// The forward for some query rows of one head: `shape` describes the head (batch and heads are
// ignored); q [seq_q, head_dim], k and v [seq_k, head_dim] hold the head's inputs (float: the
// inputs of a 16-bit step are 16-bit values, exact in float); rows[0, n_rows) are the query rows
// to compute (rows are independent in the forward). o: [n_rows, head_dim], lse: [n_rows].
//   round == nullptr: the fp64 reference, bit for bit attention_forward's values for those rows.
//   round != nullptr: low precision, as FlashAttention's attention_ref(upcast=False):
//     S_ij = round(scale·(q_i·k_j)) (the dot product in fp64), P_i = round(softmax(S_i)) (the
//     softmax in fp64, on the rounded S), O_i = round(sum_j P_ij v_j) (fp64 sum);
//     lse_i = log(sum_j exp(S_ij)) of the rounded S, in fp64 (not rounded: LSE is fp32 output).
void attention_forward_rows(const AttnShape& shape, const float* q, const float* k, const float* v, const int* rows,
                            int n_rows, Rounding round, double* o, double* lse);
// Query row i in several roundings at once (rounds[0, n_prec), null: fp64), its scores q_i·k_j computed once for
// all of them: o[c] [head_dim] and lse[c] bit for bit what attention_forward_rows gives with rounds[c].
void attention_forward_row(const AttnShape& shape, const float* q, const float* k, const float* v, int i,
                           const Rounding* rounds, int n_prec, double* const* o, double* lse);

// Gradients of the forward above for an upstream gradient dout = dL/dO. Recomputes O and LSE
// itself. dq like q, dk like k, dv like v.
void attention_backward(const AttnShape&, const double* q, const double* k, const double* v, const double* dout,
                        double* dq, double* dk, double* dv);

// The backward for some rows of one head, in fp64 or in low precision: `shape` describes the
// head (batch and heads ignored); q, dout [seq_q, head_dim], k, v [seq_k, head_dim] (float, as
// attention_forward_rows). dQ_i needs only query row i; dK_j and dV_j need every query row that
// sees key j, and of each its lse_i and delta_i, so the key rows take those statistics of every
// query row of the head (attention_backward_stats, computed once per head).
//   round == nullptr: fp64, attention_backward's values up to fp64 roundoff (the sums run in
//     another order, and delta is the sum below rather than dO_i·O_i, equal in exact math).
//   round != nullptr: low precision, the simple implementation of a FlashAttention backward in
//     the type (FlashAttention's attention_ref(upcast=False) differentiated by autograd, except
//     that delta comes from the stored O, as every FlashAttention backward computes it): each
//     matmul output and each softmax (backward) output rounded to the type, the dot products,
//     sums and the softmax itself in fp64:
//       S_ij  = round(scale·(q_i·k_j))          (as the forward)
//       lse_i = log(sum_j exp(S_ij))            (fp64, of the rounded S)
//       P_ij  = round(exp(S_ij - lse_i))        (the forward's P)
//       dP_ij = round(dO_i·v_j)                 (dP = dO·Vᵀ)
//       O_i = round(sum_j P_ij v_j)             (the forward's output, stored in the type; or
//                                                `o`, the O the backward under test is given)
//       delta_i = dO_i·O_i                      (fp64, of that O: what a FlashAttention backward
//                                                computes; sum_j P_ij dP_ij in exact math)
//       dS_ij = round(P_ij (dP_ij - delta_i))   (the softmax backward's output)
//       dQ_i = round(scale·sum_j dS_ij k_j),  dK_j = round(scale·sum_i dS_ij q_i),
//       dV_j = round(sum_i P_ij dO_i)           (the three gradient matmuls)
//     The scale is folded into the rounding of S and of dQ, dK, as the forward folds it into S.
// Masked keys (causal j > i) get P = dS = 0. lse, delta: [n_rows]; dq: [n_rows, head_dim].
void attention_backward_stats(const AttnShape& shape, const float* q, const float* k, const float* v, const float* dout,
                              const int* rows, int n_rows, Rounding round, double* lse, double* delta,
                              const float* o = nullptr);
void attention_backward_dq_rows(const AttnShape& shape, const float* q, const float* k, const float* v,
                                const float* dout, const int* rows, int n_rows, Rounding round, double* dq,
                                const float* o = nullptr);
// lse, delta: [seq_q], of every query row of the head (attention_backward_stats with the same
// `round`); key_rows[0, n_rows) the key rows to compute; dk, dv: [n_rows, head_dim].
void attention_backward_dkdv_rows(const AttnShape& shape, const float* q, const float* k, const float* v,
                                  const float* dout, const double* lse, const double* delta, const int* key_rows,
                                  int n_rows, Rounding round, double* dk, double* dv);

// The three functions above for one row in several precisions at once: precs[0, n_prec), each a rounding (null:
// fp64) and the O it is given (null: none; unused by dK, dV). Each (query, key) pair's two dot products, q_i·k_j
// and dO_i·v_j, are computed once for all of them and rounded per precision, so every output is bit for bit what
// one call per precision gives (the functions above are these with one precision). Query row i: its lse[c] and
// delta[c] in each precision c, and with dq (else null) its dQ row dq[c] [head_dim], from the same pass. Key
// row j: dk[c], dv[c] [head_dim], from lse[c], delta[c] [seq_q].
struct BwdPrecision {
  Rounding round;
  const float* o;
};
void attention_backward_q_row(const AttnShape& shape, const float* q, const float* k, const float* v, const float* dout,
                              int i, const BwdPrecision* precs, int n_prec, double* lse, double* delta,
                              double* const* dq = nullptr);
void attention_backward_dkdv_row(const AttnShape& shape, const float* q, const float* k, const float* v,
                                 const float* dout, const double* const* lse, const double* const* delta, int j,
                                 const BwdPrecision* precs, int n_prec, double* const* dk, double* const* dv);

}  // namespace ref
