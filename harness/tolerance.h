// tolerance.h: every correctness tolerance of the series, in one place. The executables'
// --check and the GoogleTest suites use the same numbers. Element i passes when
//   |out_i - ref_i| <= atol + rtol * |ref_i|       (compare.h)
// For outputs whose magnitude depends on the shape (matmul, gradients), atol is a fraction of
// the largest |ref| of that output (scaled_tolerance below). fp16/bf16 attention outputs and
// gradients are checked row by row against a bound of their own (lowp_row_bounds below,
// compare_rows).
#pragma once
#include <cmath>
#include <cstddef>
#include <vector>

#include "compare.h"
#include "lowp.h"

namespace fa::tol {

// Softmax outputs lie in [0, 1]; fp32 exp and a fp32 sum of up to millions of terms stay
// near 1e-6 relative error.
constexpr Tolerance kSoftmax{1e-8, 1e-5};
// The row log-sum-exp: a log of a sum near 1..n, plus the row max.
constexpr Tolerance kSoftmaxLse{1e-5, 1e-6};
// fp32 GEMM: a K-term fp32 dot product errs like sqrt(K)·eps·|terms|; this holds to K = 16384
// with a wide margin.
constexpr double kMatmulAtolRel = 1e-5, kMatmulRtol = 1e-5;
// fp32 attention: O is a convex combination of V rows (|O| ~ 1), accumulated over up to 16k
// keys in fp32; LSE is a log-sum-exp of scores; gradients are sums over seq terms.
constexpr double kAttnOutAtolRel = 2e-5, kAttnOutRtol = 2e-4;
constexpr Tolerance kAttnLse{1e-4, 1e-5};
constexpr double kAttnGradAtolRel = 1e-4, kAttnGradRtol = 1e-3;
// ...and an absolute floor for gradients that cancel to zero: with one visible key,
// dS = P·(dP − Δ) with dP = Δ exactly, but the two are the same dot product summed in different
// orders, so fp32 leaves ~1e-7·|dO|·|V| where fp64 leaves ~1e-16. The inputs of every check are
// O(1), so 1e-5 is ~100x that roundoff and far below any real error.
constexpr double kAttnGradAtolFloor = 1e-5;

// fp16/bf16 attention (steps 09+: Q, K, V, O in 16 bits, fp32 accumulation, LSE fp32), checked
// against the fp64 reference on the same rounded inputs. The FlashAttention rule (docs/conventions.md, "Correctness")
// allows twice the error of a simple low-precision implementation of the same math,
// ref_lowp (ref::attention_forward_rows with rounding, as FlashAttention's
// attention_ref(upcast=False): S = lowp(scale·Q·Kᵀ), P = lowp(softmax(S)), O = lowp(P·V), the
// dot products exact, softmax in fp64). It is applied per query row, not to the whole tensor:
// the inputs hold one query row 20x larger on purpose, whose rounded scores move its softmax far
// more than any other row's, and a whole-tensor bound would let every row err that much. So
//   row i passes  iff  max_j |O_ij - ref_ij| <= kLowpErrFactor · max_j |ref_lowp_ij - ref_ij|
//                                               + ulp_dtype(max_j |ref_ij|)
// The one-ulp floor: rounding the output to the dtype alone costs half an ulp, and some rows
// have ref_lowp exact (one visible key: O = V exactly), where the factor alone would allow 0.
//
// The backward (dQ, dK, dV in 16 bits) follows the same rule with the same factor, ref_lowp the
// backward of the same simple implementation differentiated as autograd does
// (ref::attention_backward_*_rows with rounding): the inputs (Q, K, V, dO) are 16-bit values,
// every matmul output is rounded (S, dP = dO·Vᵀ, dQ = dS·K·scale, dK = dSᵀ·Q·scale,
// dV = Pᵀ·dO), and so is every softmax output (P, and the softmax backward's dS = P∘(dP − delta));
// the dot products, the softmax and the row sums in fp64. delta = rowsum(dO∘O) of the 16-bit O
// the step's backward is given (its forward's output), as every FlashAttention backward computes
// it: equal to rowsum(P∘dP) in exact math, it carries O's error into every dS of the row, the
// same in the step and in ref_lowp (with delta = rowsum(P∘dP) in ref_lowp instead, a first fp16
// backward on the H100 erred by several times the bound in many rows). Rows are
// those of each gradient: a query row of dQ, a key row of dK and of dV (the large query row moves
// every key row of its head, but one query row's dQ alone).
constexpr double kLowpErrFactor = 2.0;
// ...plus, for dQ and dK, the error that the given O alone causes, in full: max_j |ref_given_ij −
// ref_ij| with ref_given the fp64 backward whose only change is delta from the given 16-bit O. That
// error is the same in the step and in ref_lowp (|δ error| ≈ |dO|·ulp(O)·sqrt(head_dim), shifting
// every dS_ij of row i by P_ij times it, so dQ_i by that times P_i·K), but in ref_lowp the rounding
// of dP, of similar size, is added to it, and in a row where a few dS terms dominate (a peaked
// softmax: large inputs, the 20x query row) the two can cancel by chance, leaving a bound far
// below an error every FlashAttention backward makes. Measured on an emulation of such a backward
// (S and dP exact, P and dS rounded, delta from the 16-bit O): without this term up to ~13x over
// the bound in such rows; with it, none over, and the bound of the median row grows by ~5%.
// Against a previous step whose forward differs (its O is not this step's, element for element),
// the error from its own O is added too: the previous step's gradients carry what delta from its O
// moves, as this step's carry what delta from this step's O moves, and |got − want| <= |got − ref|
// + |ref − want|. So that comparison adds max_j |ref_prev_ij − ref_ij|, ref_prev the fp64 backward
// with delta from the previous step's O (add_from_prev_o). Measured on the H100: step 20 (step 19's
// forward) against step 16 (its own), B1 H3 Sq1000 Sk999 D64 bf16, one dQ row off by 0.000427 where
// its bound was 0.000301, by a nearly constant offset along the row (K's entries average 0.5, so
// P_i·K is near 0.5 in every column); the same shapes passed against fp64. Where both O are equal,
// nothing is added: both gradients then carry the same shift, which cancels in their difference, so
// steps that share a forward are held as strictly as before.
//
// Last, an absolute floor for values that underflow fp32: a kernel computes P = exp(S − LSE) and
// the products in fp32 and flushes what falls below fp32's smallest normal, 2^-126 (ex2.approx.ftz;
// FTZ arithmetic), where the reference rounds to bf16's subnormals (bf16 shares fp32's exponent
// range). A key row that no query attends to above that (the x8 golden inputs: P ~ e^-90) then
// has gradients of ~1e-37 that the kernel returns as 0. A row sums at most 2^20 terms of magnitude
// at most 2^6 here, so flushing loses at most 2^-100 (~8e-31): far below any gradient that is not
// itself underflowing (they are 1e-4..1e2).
constexpr double kUnderflowFloor = 0x1p-100;
// And for the gradients, fp32's cancellation floor kAttnGradAtolFloor (above): where dP = Δ
// exactly (one visible key: O = V row, so dS = 0 and dQ = 0), the kernel sums the two dot
// products in fp32 in different orders (mma for dP, the delta kernel for Δ) and leaves ~1e-7,
// while ref_lowp, in fp64, leaves nothing, so the rule above gives a bound near 0. Measured on
// the H100 (step 16, seq_k = 1, d 128): 3.6e-7 in a row whose bound was 1.8e-7. 1e-5 is far
// below a 16-bit rounding of any gradient that is not itself zero (ulp of 1: 1e-3 fp16, 8e-3 bf16).
// LSE stays fp32 in every step and is computed from fp32 sums of exact products (a product of
// two fp16 or two bf16 values is exact in fp32): it carries no 16-bit rounding, so it keeps the
// fp32 tolerance kAttnLse (stricter than the per-row rule, which would allow the error of
// scores rounded to 16 bits). The same holds against an fp32 previous step on the same inputs.
constexpr Tolerance kAttnLseLowp = kAttnLse;
// The command line's --check compares every element of a 16-bit backward with the previous step's
// at a bound measured on sampled rows only: the fp64 reference of a key row needs its whole head's
// statistics, so the key rows come from a few heads. A row outside the sample may need more: at
// B8 H32 S2048 D64 fp16 (run_all's problem), one dK element of step 12 differed from step 08's by
// 1.15x the largest bound of 2048 key rows of 2 of 256 heads. So that comparison allows this
// factor times the sampled bound; the sampled rows are checked against fp64 at their own bound, and
// the tests check every row of their (smaller) problems against fp64.
constexpr double kSampledBoundMargin = 2.0;

}  // namespace fa::tol

namespace fa {

// atol = max(atol_rel · max |ref| (finite values only), atol_floor), rtol as given.
template <class T>
Tolerance scaled_tolerance(double atol_rel, double rtol, const std::vector<T>& ref, double atol_floor = 0) {
  double m = 0;
  for (const T& v : ref)
    if (std::isfinite(double(v))) m = std::fmax(m, std::fabs(double(v)));
  return {std::fmax(atol_rel * (m > 0 ? m : 1.0), atol_floor), rtol};
}

// The per-row bounds of the rule above for a [rows, cols] output: ref (fp64) and ref_lowp (the
// low-precision implementation) of the same rows, on the same rounded inputs; for dQ and dK also
// ref_given (fp64 with delta from the given O, BwdRowRef::dq_given), whose distance to ref is
// added in full (the backward rule above); abs_floor: added to every row (gradients:
// kAttnGradAtolFloor).
inline std::vector<double> lowp_row_bounds(const std::vector<double>& ref, const std::vector<double>& ref_lowp,
                                           std::size_t cols, DType t, const std::vector<double>* ref_given = nullptr,
                                           double abs_floor = 0) {
  std::vector<double> bound(cols ? ref.size() / cols : 0);
  const bool given = ref_given && !ref_given->empty();
  for (std::size_t i = 0; i < bound.size(); ++i) {
    double err = 0, mag = 0, from_o = 0;
    for (std::size_t j = i * cols; j < (i + 1) * cols; ++j) {
      err = std::fmax(err, std::fabs(ref_lowp[j] - ref[j]));
      mag = std::fmax(mag, std::fabs(ref[j]));
      if (given) from_o = std::fmax(from_o, std::fabs((*ref_given)[j] - ref[j]));
    }
    bound[i] = tol::kLowpErrFactor * err + ulp(t, mag) + from_o + tol::kUnderflowFloor + abs_floor;
  }
  return bound;
}

// The rule's term for a previous step whose forward differs (above): adds to each row of `bound`
// (this step's, of lowp_row_bounds) max_j |ref_prev_ij − ref_ij|, ref_prev the fp64 backward with
// delta from the previous step's O (BwdRowRef::dq_prev, dk_prev of reference_bwd_rows, for dQ and dK).
inline void add_from_prev_o(std::vector<double>& bound, const std::vector<double>& ref,
                            const std::vector<double>& ref_prev, std::size_t cols) {
  for (std::size_t i = 0; i < bound.size(); ++i) {
    double from_o = 0;
    for (std::size_t j = i * cols; j < (i + 1) * cols; ++j) from_o = std::fmax(from_o, std::fabs(ref_prev[j] - ref[j]));
    bound[i] += from_o;
  }
}

}  // namespace fa
