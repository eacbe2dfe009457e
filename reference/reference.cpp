// reference.cpp: fp64 CPU references. See reference.h for the conventions.
#include "reference.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <vector>

namespace ref {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Inputs are double, or float for the rows of a low-precision step (every float is a double).
// In index order: matmul's NT product, which must agree bit for bit with its NN product's axpy order.
template <class T>
double dot_in_order(const T* a, const T* b, long long n) {
  double s = 0.0;
  for (long long i = 0; i < n; ++i) s += double(a[i]) * double(b[i]);
  return s;
}
// The attention references' products: eight running sums (elements i mod 8), added pairwise at the end.
// One sum is a chain of dependent adds, each waiting for the last; eight keep the vector adder busy, and
// the suite's fp64 references spend most of their time here. On fp16/bf16 inputs a product has at most 22
// significant bits, so over inputs of similar magnitudes the partial sums are exact in fp64 and the order
// moves no bit; elsewhere (fp32 inputs, magnitudes far apart) it moves the last bits only.
template <class T>
double dot(const T* a, const T* b, long long n) {
  double s[8] = {};
  long long i = 0;
  for (; i + 8 <= n; i += 8)
    for (int u = 0; u < 8; ++u) s[u] += double(a[i + u]) * double(b[i + u]);
  for (; i < n; ++i) s[0] += double(a[i]) * double(b[i]);
  return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
}

// y += alpha * x
template <class T>
void axpy(double alpha, const T* x, double* y, long long n) {
  for (long long i = 0; i < n; ++i) y[i] += alpha * double(x[i]);
}

// Safe softmax of one row x[0, n) into y[0, n); returns the row's log-sum-exp
// log(sum_i exp(x_i)) = m + log(sum_i exp(x_i - m)) with m = max_i x_i.
// Subtracting m makes every exp() argument <= 0, so nothing overflows even for x ~ 3e38, and
// the largest term is exp(0) = 1, so the sum is >= 1 and the division is safe.
double softmax_row(const double* x, double* y, long long n) {
  double m = -kInf;
  for (long long i = 0; i < n; ++i) {
    // NaN propagates, and +inf gives exp(inf - inf) = NaN: either makes the whole row NaN.
    if (std::isnan(x[i]) || x[i] == kInf) {
      std::fill(y, y + n, kNaN);
      return kNaN;
    }
    m = std::max(m, x[i]);
  }
  if (m == -kInf) {  // every entry -inf (or no entry): the row attends to nothing
    std::fill(y, y + n, 0.0);
    return -kInf;
  }
  double l = 0.0;
  for (long long i = 0; i < n; ++i) {
    y[i] = std::exp(x[i] - m);  // exp(-inf) = 0 for masked entries
    l += y[i];
  }
  for (long long i = 0; i < n; ++i) y[i] /= l;
  return m + std::log(l);
}

// Number of keys query i may see: keys [0, n) (causal: j <= i + causal_offset; 0 top-left aligned).
int visible_keys(const AttnShape& s, int i) {
  return s.causal ? std::clamp(i + 1 + s.causal_offset, 0, s.seq_k) : s.seq_k;
}

// Query row i's scores with its n visible keys (masked keys would get S = -inf, i.e. P = 0: skipped):
// s_raw[j] = scale·(q_i·k_j), before any rounding. Returns n.
template <class T>
int row_scores(const AttnShape& s, const T* Q, const T* K, int i, double* s_raw) {
  const long long D = s.head_dim;
  const int n = visible_keys(s, i);
  for (int j = 0; j < n; ++j) s_raw[j] = s.scale * dot(Q + i * D, K + j * D, D);
  return n;
}

// Query row i of one head from its scores (row_scores) into o_row [D]; returns its LSE. srow and prow:
// scratch of seq_k. round: see attention_forward_rows (null: plain fp64).
template <class T>
double forward_row(const AttnShape& s, const T* V, int n, const double* s_raw, Rounding round, double* srow,
                   double* prow, double* o_row) {
  const long long D = s.head_dim;
  for (int j = 0; j < n; ++j) srow[j] = round ? round(s_raw[j]) : s_raw[j];
  const double lse = softmax_row(srow, prow, n);
  if (round)
    for (int j = 0; j < n; ++j) prow[j] = round(prow[j]);
  // O_i = sum_j P_ij V_j
  std::fill(o_row, o_row + D, 0.0);
  for (int j = 0; j < n; ++j) axpy(prow[j], V + j * D, o_row, D);
  if (round)
    for (long long d = 0; d < D; ++d) o_row[d] = round(o_row[d]);
  return lse;
}

// x rounded by `round`, or x itself (fp64) without one.
double rounded(Rounding round, double x) { return round ? round(x) : x; }

// Query row i's two products with each of its n visible keys, shared by every precision:
// s_raw[j] = scale·(q_i·k_j) (S before any rounding) and dp_raw[j] = dO_i·v_j (dP before any rounding).
int row_dots(const AttnShape& s, const float* Q, const float* K, const float* V, const float* dO, int i, double* s_raw,
             double* dp_raw) {
  const long long D = s.head_dim;
  const int n = row_scores(s, Q, K, i, s_raw);
  for (int j = 0; j < n; ++j) dp_raw[j] = dot(dO + i * D, V + j * D, D);
  return n;
}

// From row i's products (row_dots) in one precision: S_ij = round(s_raw_j), then P_ij = round(exp(S_ij -
// lse_i)) and dP_ij = round(dp_raw_j) over its n visible keys into p[0, n) and dp[0, n); sets lse_i and
// delta_i (see attention_backward_stats). Inputs are finite (a rounded input is), so the row's max is finite.
void backward_row(const AttnShape& s, const float* V, const float* dO, int i, int n, const double* s_raw,
                  const double* dp_raw, const BwdPrecision& prec, double* p, double* dp, double* lse, double* delta) {
  const long long D = s.head_dim;
  const Rounding round = prec.round;
  double m = -kInf, l = 0.0;
  for (int j = 0; j < n; ++j) {
    p[j] = rounded(round, s_raw[j]);  // S_ij
    m = std::max(m, p[j]);
  }
  for (int j = 0; j < n; ++j) l += std::exp(p[j] - m);
  *lse = n ? m + std::log(l) : -kInf;
  *delta = 0.0;
  for (int j = 0; j < n; ++j) {
    p[j] = rounded(round, std::exp(p[j] - *lse));  // P_ij
    dp[j] = rounded(round, dp_raw[j]);             // dP_ij
    if (!round) *delta += p[j] * dp[j];
  }
  if (round && prec.o) {  // delta from the O the backward is given, as FlashAttention computes it
    for (long long d = 0; d < D; ++d) *delta += double(dO[i * D + d]) * double(prec.o[i * D + d]);
  } else if (round) {  // delta from its own stored low-precision O_i = round(sum_j P_ij V_j)
    std::vector<double> o(D, 0.0);
    for (int j = 0; j < n; ++j) axpy(p[j], V + j * D, o.data(), D);
    for (long long d = 0; d < D; ++d) *delta += double(dO[i * D + d]) * round(o[d]);
  }
}

}  // namespace

void softmax(const double* x, double* y, long long rows, long long cols) {
  for (long long r = 0; r < rows; ++r) softmax_row(x + r * cols, y + r * cols, cols);
}

void matmul(const double* A, const double* B, double* C, int M, int N, int K, double alpha, bool b_is_nk) {
  for (int m = 0; m < M; ++m) {
    const double* a = A + std::size_t(m) * K;  // row m of A, [K]
    double* c = C + std::size_t(m) * N;        // row m of C, [N]
    if (b_is_nk) {
      // C[m, n] = alpha * (row m of A) · (row n of B): both rows contiguous.
      for (int n = 0; n < N; ++n) c[n] = alpha * dot_in_order(a, B + std::size_t(n) * K, K);
    } else {
      // Row m of C = sum_k A[m, k] * (row k of B): sweeps contiguous rows of B and C.
      // Same summation order over k as the NT branch, so NT and NN agree bit for bit.
      std::fill(c, c + N, 0.0);
      for (int k = 0; k < K; ++k) axpy(a[k], B + std::size_t(k) * N, c, N);
      for (int n = 0; n < N; ++n) c[n] *= alpha;
    }
  }
}

void attention_forward(const AttnShape& s, const double* q, const double* k, const double* v, double* o, double* lse) {
  const long long D = s.head_dim;
  std::vector<double> srow(s.seq_k), prow(s.seq_k);  // row i of S and of P
  for (long long bh = 0; bh < (long long)s.batch * s.heads; ++bh) {
    const double* Q = q + bh * s.seq_q * D;  // [seq_q, D]
    const double* K = k + bh * s.seq_k * D;  // [seq_k, D]
    const double* V = v + bh * s.seq_k * D;  // [seq_k, D]
    double* O = o + bh * s.seq_q * D;        // [seq_q, D]
    double* L = lse + bh * s.seq_q;          // [seq_q]
    for (int i = 0; i < s.seq_q; ++i) {
      const int n = row_scores(s, Q, K, i, srow.data());
      L[i] = forward_row(s, V, n, srow.data(), nullptr, srow.data(), prow.data(), O + i * D);
    }
  }
}

void attention_forward_row(const AttnShape& s, const float* q, const float* k, const float* v, int i,
                           const Rounding* rounds, int n_prec, double* const* o, double* lse) {
  std::vector<double> s_raw(s.seq_k), srow(s.seq_k), prow(s.seq_k);
  const int n = row_scores(s, q, k, i, s_raw.data());
  for (int c = 0; c < n_prec; ++c)
    lse[c] = forward_row(s, v, n, s_raw.data(), rounds[c], srow.data(), prow.data(), o[c]);
}

void attention_forward_rows(const AttnShape& s, const float* q, const float* k, const float* v, const int* rows,
                            int n_rows, Rounding round, double* o, double* lse) {
  for (int r = 0; r < n_rows; ++r) {
    double* o_r = o + std::size_t(r) * s.head_dim;
    attention_forward_row(s, q, k, v, rows[r], &round, 1, &o_r, &lse[r]);
  }
}

// The backward, for L a scalar loss and dO = dL/dO given:
//   O = P·V                  ->  dV = Pᵀ·dO,  dP = dO·Vᵀ
//   P_i = softmax(S_i)       ->  dS_ij = sum_k dP_ik ∂P_ik/∂S_ij, with the softmax Jacobian
//                                ∂P_ik/∂S_ij = P_ik (δ_kj - P_ij), so
//                                dS_ij = P_ij (dP_ij - delta_i),  delta_i = sum_k P_ik dP_ik
//                                and delta_i = sum_k P_ik (dO_i·V_k) = dO_i·O_i = rowsum(dO∘O)_i
//   S = Q·Kᵀ·scale           ->  dQ = dS·K·scale,  dK = dSᵀ·Q·scale
// As in FlashAttention, P is not stored: P_ij = exp(S_ij - LSE_i) is recomputed from the LSE,
// one entry at a time, and every term is accumulated straight into dQ, dK, dV.
void attention_backward(const AttnShape& s, const double* q, const double* k, const double* v, const double* dout,
                        double* dq, double* dk, double* dv) {
  const long long D = s.head_dim, BH = (long long)s.batch * s.heads;
  // Recompute the forward: O for delta, LSE to rebuild P.
  std::vector<double> o(BH * s.seq_q * D), lse(BH * s.seq_q);
  attention_forward(s, q, k, v, o.data(), lse.data());
  std::fill(dq, dq + BH * s.seq_q * D, 0.0);
  std::fill(dk, dk + BH * s.seq_k * D, 0.0);
  std::fill(dv, dv + BH * s.seq_k * D, 0.0);

  for (long long bh = 0; bh < BH; ++bh) {
    const long long qo = bh * s.seq_q * D, ko = bh * s.seq_k * D;  // offsets of this (b, h)
    for (int i = 0; i < s.seq_q; ++i) {
      const double lse_i = lse[bh * s.seq_q + i];
      if (lse_i == -kInf) continue;  // the row attends to nothing: P_i = 0, no gradient flows
      const double* Qi = q + qo + i * D;
      const double* dOi = dout + qo + i * D;
      double* dQi = dq + qo + i * D;
      const double delta = dot(dOi, o.data() + qo + i * D, D);  // rowsum(dO_i ∘ O_i)
      for (int j = 0; j < visible_keys(s, i); ++j) {
        const double* Kj = k + ko + j * D;
        const double* Vj = v + ko + j * D;
        const double p = std::exp(s.scale * dot(Qi, Kj, D) - lse_i);  // P_ij
        const double dp = dot(dOi, Vj, D);                            // dP_ij
        const double ds = p * (dp - delta);                           // dS_ij
        axpy(p, dOi, dv + ko + j * D, D);                             // dV_j += P_ij dO_i
        axpy(ds * s.scale, Kj, dQi, D);                               // dQ_i += dS_ij K_j scale
        axpy(ds * s.scale, Qi, dk + ko + j * D, D);                   // dK_j += dS_ij Q_i scale
      }
    }
  }
}

void attention_backward_q_row(const AttnShape& s, const float* q, const float* k, const float* v, const float* dout,
                              int i, const BwdPrecision* precs, int n_prec, double* lse, double* delta,
                              double* const* dq) {
  const long long D = s.head_dim;
  std::vector<double> s_raw(s.seq_k), dp_raw(s.seq_k), p(s.seq_k), dp(s.seq_k);
  const int n = row_dots(s, q, k, v, dout, i, s_raw.data(), dp_raw.data());
  for (int c = 0; c < n_prec; ++c) {
    backward_row(s, v, dout, i, n, s_raw.data(), dp_raw.data(), precs[c], p.data(), dp.data(), &lse[c], &delta[c]);
    if (!dq) continue;
    const Rounding round = precs[c].round;
    double* dQi = dq[c];
    std::fill(dQi, dQi + D, 0.0);
    for (int j = 0; j < n; ++j) axpy(rounded(round, p[j] * (dp[j] - delta[c])), k + j * D, dQi, D);  // dS_ij k_j
    for (long long d = 0; d < D; ++d) dQi[d] = rounded(round, s.scale * dQi[d]);
  }
}

void attention_backward_dkdv_row(const AttnShape& s, const float* q, const float* k, const float* v, const float* dout,
                                 const double* const* lse, const double* const* delta, int j, const BwdPrecision* precs,
                                 int n_prec, double* const* dk, double* const* dv) {
  const long long D = s.head_dim;
  const float *Kj = k + j * D, *Vj = v + j * D;
  for (int c = 0; c < n_prec; ++c) std::fill(dk[c], dk[c] + D, 0.0), std::fill(dv[c], dv[c] + D, 0.0);
  for (int i = 0; i < s.seq_q; ++i) {
    if (j >= visible_keys(s, i)) continue;  // key j is masked for query i
    const float *Qi = q + i * D, *dOi = dout + i * D;
    const double s_raw = s.scale * dot(Qi, Kj, D), dp_raw = dot(dOi, Vj, D);  // once for every precision
    for (int c = 0; c < n_prec; ++c) {
      if (lse[c][i] == -kInf) continue;  // the row attends to nothing: no term
      const Rounding round = precs[c].round;
      const double p = rounded(round, std::exp(rounded(round, s_raw) - lse[c][i]));  // P_ij
      const double dp = rounded(round, dp_raw);                                      // dP_ij
      axpy(p, dOi, dv[c], D);                                                        // dV_j += P_ij dO_i
      axpy(rounded(round, p * (dp - delta[c][i])), Qi, dk[c], D);                    // dK_j += dS_ij q_i
    }
  }
  for (int c = 0; c < n_prec; ++c)
    for (long long d = 0; d < D; ++d)
      dk[c][d] = rounded(precs[c].round, s.scale * dk[c][d]), dv[c][d] = rounded(precs[c].round, dv[c][d]);
}

void attention_backward_stats(const AttnShape& s, const float* q, const float* k, const float* v, const float* dout,
                              const int* rows, int n_rows, Rounding round, double* lse, double* delta, const float* o) {
  const BwdPrecision prec{round, o};
  for (int r = 0; r < n_rows; ++r) attention_backward_q_row(s, q, k, v, dout, rows[r], &prec, 1, &lse[r], &delta[r]);
}

void attention_backward_dq_rows(const AttnShape& s, const float* q, const float* k, const float* v, const float* dout,
                                const int* rows, int n_rows, Rounding round, double* dq, const float* o) {
  const BwdPrecision prec{round, o};
  for (int r = 0; r < n_rows; ++r) {
    double* dq_r = dq + std::size_t(r) * s.head_dim;
    double lse, delta;
    attention_backward_q_row(s, q, k, v, dout, rows[r], &prec, 1, &lse, &delta, &dq_r);
  }
}

void attention_backward_dkdv_rows(const AttnShape& s, const float* q, const float* k, const float* v, const float* dout,
                                  const double* lse, const double* delta, const int* key_rows, int n_rows,
                                  Rounding round, double* dk, double* dv) {
  const BwdPrecision prec{round, nullptr};
  for (int r = 0; r < n_rows; ++r) {
    double *dk_r = dk + std::size_t(r) * s.head_dim, *dv_r = dv + std::size_t(r) * s.head_dim;
    attention_backward_dkdv_row(s, q, k, v, dout, &lse, &delta, key_rows[r], &prec, 1, &dk_r, &dv_r);
  }
}

}  // namespace ref
