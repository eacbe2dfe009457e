// =============================================================================================
// FlashAttention from scratch, step by step, in CUDA C++
// Step 11: the tuned forward: tile shapes as template instances, chosen per problem by a cached
//          autotuner; an inner loop trimmed by reading the SASS; an epilogue through shared memory
//
// What changes since step 10: nothing in the math and nothing in the memory layout (swizzle,
// cp.async ring, exp2 are step 10's). What was a constant is now a template parameter of Config:
// WARPS, MF (16-row mma fragments per warp: with MF = 2 every K and V fragment read from shared
// memory feeds two mma, which halves the ldmatrix bytes per mma), BLOCK_N, STAGES, and Q_IN_REGS
// (Q fragments held in registers, as in step 10, or re-read from shared memory every tile).
//
// A few instances are compiled (the candidates of each head_dim, bottom of the file). The first
// launch of a problem class times every candidate on the caller's buffers and caches the fastest
// (host/autotune.h). Tune a class before capturing its launches in a CUDA graph: one launch
// outside the capture, or step11::tune(). Query heads may share K/V heads (grouped-query).
//
// Trimmed from the inner loop: the O rescale runs only when some row's max moved (a warp-uniform
// branch), and the output goes through shared memory (the dead Q tile) so that every global store
// is 16 bytes. docs/11 maps every hunk of the diff from step 10 to one of these ideas, with the
// bytes per mma, the SASS before and after each trim, and the autotuner's cache.
//
// Build + run:  cmake --build build --target 11_tuned_forward && build/bin/11_tuned_forward
// Read with:    docs/11_tuned_forward.md
// =============================================================================================
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include "autotune.h"
#include "check.h"
#include "cp_async.cuh"
#include "launch.h"
#include "mma_sync.cuh"
#include "ops.h"

namespace step11 {
using namespace fa::ptx;  // step 09's ldmatrix_x4, mma_16816, pack, quad_*; step 10's cp_async_*, exp2_approx, swz

const fa::StepInfo& info();  // bottom of the file: the step's name for messages

constexpr int kWarp = 32;

// ---- one instance: every tile shape of the kernel ---------------------------------------------------
template <int D_, int WARPS_, int MF_, int BLOCK_N_, int STAGES_, bool Q_IN_REGS_>
struct Config {
  static constexpr int D = D_, WARPS = WARPS_, MF = MF_, BLOCK_N = BLOCK_N_, STAGES = STAGES_;
  static constexpr bool Q_IN_REGS = Q_IN_REGS_;
  static constexpr int THREADS = WARPS * kWarp;
  static constexpr int BLOCK_M = WARPS * 16 * MF;  // query rows per block
  static constexpr std::size_t SMEM_BYTES = 2 * std::size_t(BLOCK_M + 2 * STAGES * BLOCK_N) * D;  // 16-bit
  static_assert(D == 64 || D == 128, "head_dim instances 64 and 128");
  static_assert(STAGES >= 2, "a ring needs a slot to fill while one is read");
  static_assert(SMEM_BYTES <= 227 * 1024, "fits one SM's shared memory");
};

// As in step 02: a row that has seen only -inf shifts by 0, so its exponentials are 0, not NaN.
__device__ __forceinline__ float safe_shift(float m) { return m == -INFINITY ? 0.f : m; }

// ---- device memory -> shared memory: step 10's copies with cheaper addresses ---------------------------
// Step 10 recomputed, for each of a thread's chunks, the row, the column, the swizzled offset and a
// 64-bit global address: ptxas kept those per-chunk addresses live across the loop (registers) or
// rebuilt them every tile (instructions). Here a thread owns ONE chunk column c for every tile and
// the rows r0, r0 + ROW_STEP, r0 + 2·ROW_STEP, ...: ROW_STEP is a multiple of 8, so all its rows share
// r % 8 and thus the swizzled position of c. Load i is then the same base plus i·ROW_STEP rows, a
// compile-time constant that folds into the LDGSTS instruction ([R+imm]) on both sides.
template <int ROWS, int D, int THREADS>
struct TileCopy {
  static constexpr int CHUNKS = D / 8;             // 16-byte chunks per row
  static constexpr int ROW_STEP = THREADS / CHUNKS;  // rows between a thread's chunks
  static constexpr int VECS = ROWS / ROW_STEP;       // chunks per thread
  static_assert(THREADS % CHUNKS == 0 && ROWS % ROW_STEP == 0, "every thread moves VECS chunks of one column");
  static_assert(ROW_STEP % 8 == 0, "all of a thread's rows share r % 8: one swizzled offset");
  int r0, c, smem_off;  // this thread's first row, its chunk column, swz(r0, c)
  __device__ TileCopy() : r0(threadIdx.x / CHUNKS), c(threadIdx.x % CHUNKS), smem_off(swz<D>(r0, c)) {}

  // Rows >= seq and columns >= head_dim are zero-filled, as in step 10. A tile wholly inside the
  // matrix with head_dim = D (all but the last tile, in the benchmarks) takes the branch-free path.
  template <class T>
  __device__ __forceinline__ void issue(T* dst, const T* __restrict__ src, int row0, int seq, int head_dim) const {
    const int left = seq - row0 - r0;  // rows of this thread's column that exist: r0 + i·ROW_STEP < seq - row0
    if (head_dim == D && left > (VECS - 1) * ROW_STEP) {
      const T* from = src + std::size_t(row0 + r0) * D + 8 * c;
#pragma unroll
      for (int i = 0; i < VECS; ++i) cp_async_16(dst + smem_off + i * ROW_STEP * D, from + i * ROW_STEP * D, 16);
    } else {
#pragma unroll
      for (int i = 0; i < VECS; ++i) {
        const bool in = i * ROW_STEP < left && 8 * c < head_dim;  // head_dim % 8 == 0: a chunk is wholly in or out
        const T* from = in ? src + std::size_t(row0 + r0 + i * ROW_STEP) * head_dim + 8 * c : src;
        cp_async_16(dst + smem_off + i * ROW_STEP * D, from, in ? 16 : 0);
      }
    }
  }
};

// ---- the kernel ----------------------------------------------------------------------------------------
// grid (query blocks, batch·heads); block C::THREADS. T: __half or __nv_bfloat16. GQA: query head
// h of a batch reads K/V head h / heads_per_kv (1 for MHA).
template <class T, class C>
__global__ void __launch_bounds__(C::THREADS)
    tc_forward(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v, T* __restrict__ o,
               float* __restrict__ lse, int seq_q, int seq_k, int head_dim, float scale, bool causal,
               int heads_per_kv) {
  constexpr int D = C::D, MF = C::MF, BLOCK_M = C::BLOCK_M, BLOCK_N = C::BLOCK_N, STAGES = C::STAGES;
  // scale·log2(e): exp(scale·(s − m)) = 2^(s·sl2 − m·sl2), one FFMA + one EX2 per score
  const float sl2 = scale * 1.4426950408889634f;
  static_assert(D % 16 == 0 && BLOCK_N % 16 == 0, "whole 16-deep mma steps over head_dim and keys");
  extern __shared__ uint4 smem[];        // uint4: 16-byte alignment for ldmatrix and cp.async
  T* Qs = reinterpret_cast<T*>(smem);    // [BLOCK_M, D] swizzled; the O tile at the end
  T* Ks = Qs + BLOCK_M * D;              // [STAGES][BLOCK_N, D] swizzled, a ring
  T* Vs = Ks + STAGES * BLOCK_N * D;     // [STAGES][BLOCK_N, D] swizzled, a ring

  // Causal: the last query block (the most key tiles) runs first, as in step 06.
  const int qb = causal ? gridDim.x - 1 - blockIdx.x : blockIdx.x;
  const int m0 = qb * BLOCK_M;        // first query row of this block
  const std::size_t bh = blockIdx.y;  // flattened (batch, head)
  // b·H + h over H/KVH = b·KVH + h/(H/KVH): the flattened (batch, K/V head), with no division by H.
  const std::size_t kv_bh = bh / heads_per_kv;
  q += bh * seq_q * head_dim, k += kv_bh * seq_k * head_dim, v += kv_bh * seq_k * head_dim;
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int g = lane / 4, t4 = lane % 4;  // this lane's fragment row (g, g+8) and column pair (2·t4)
  const int w0 = warp * 16 * MF;          // this warp's first row in the block: fragment mf = rows w0 + 16mf ..

  // The stages of step 06. Tiles [0, n_full) need no mask (causal: every key <= m0; non-causal:
  // every key < seq_k); the loop ends with the last tile holding a key the block's last row sees.
  const int kv_end = causal ? min(seq_k, min(m0 + BLOCK_M, seq_q)) : seq_k;
  const int n_tiles = (kv_end + BLOCK_N - 1) / BLOCK_N;
  const int n_full = (causal ? min(m0 + 1, seq_k) : seq_k) / BLOCK_N;

  // The pipeline's prologue: Q, then K/V tiles 0 .. STAGES-2, each its own commit group (an empty
  // group past the last tile, so that every thread always counts the same groups).
  TileCopy<BLOCK_M, D, C::THREADS>().issue(Qs, q, m0, seq_q, head_dim);
  cp_async_commit();
  const TileCopy<BLOCK_N, D, C::THREADS> kv_copy;
  auto issue = [&](int t) {  // K_t and V_t into ring slot t % STAGES
    if (t < n_tiles) {
      T* slot_k = Ks + t % STAGES * BLOCK_N * D;
      T* slot_v = Vs + t % STAGES * BLOCK_N * D;
      kv_copy.issue(slot_k, k, t * BLOCK_N, seq_k, head_dim);
      kv_copy.issue(slot_v, v, t * BLOCK_N, seq_k, head_dim);
    }
    cp_async_commit();
  };
#pragma unroll
  for (int t = 0; t < STAGES - 1; ++t) issue(t);

  // Q in shared memory before its fragments are read (its group is the oldest: wait for all
  // but the STAGES-1 K/V groups).
  cp_async_wait<STAGES - 1>();
  __syncthreads();

  // A fragments of this warp's Q rows: fragment mf, k-step kk = dims 16kk..16kk+15. Held in
  // registers (Q_IN_REGS) or read again each tile.
  auto load_q = [&](std::uint32_t(&a)[4], int mf, int kk) {
    ldmatrix_x4(a, Qs + swz<D>(w0 + 16 * mf + lane % 16, 2 * kk + lane / 16));
  };
  [[maybe_unused]] std::uint32_t qf[C::Q_IN_REGS ? MF : 1][C::Q_IN_REGS ? D / 16 : 1][4];  // [16·MF, D] or unused
  if constexpr (C::Q_IN_REGS) {
#pragma unroll
    for (int mf = 0; mf < MF; ++mf)
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) load_q(qf[mf][kk], mf, kk);
  }

  float acc[MF][D / 8][4];  // [16·MF, D] unnormalised O rows, C fragments
  float m[MF][2], l[MF][2];  // rows g and g+8 of each fragment: running max (raw score), partial sum
#pragma unroll
  for (int mf = 0; mf < MF; ++mf) {
    m[mf][0] = m[mf][1] = -INFINITY, l[mf][0] = l[mf][1] = 0.f;
#pragma unroll
    for (int j = 0; j < D / 8; ++j) acc[mf][j][0] = acc[mf][j][1] = acc[mf][j][2] = acc[mf][j][3] = 0.f;
  }

  auto attend = [&](int t, auto masked) {
    const int n0 = t * BLOCK_N;  // first key of this tile
    cp_async_wait<STAGES - 2>();  // this thread's copies of tile t have landed ...
    __syncthreads();              // ... and everyone's; every warp is also done with tile t-1
    issue(t + STAGES - 1);        // into slot (t-1) % STAGES, free since the barrier
    const T* Kt = Ks + t % STAGES * BLOCK_N * D;
    const T* Vt = Vs + t % STAGES * BLOCK_N * D;

    // S = Q·Kᵀ: B[d][key] = K[key][d], so a B fragment is 8 keys × 16 dims of K read row by row:
    // plain ldmatrix. One x4 covers keys 16jj..16jj+15 (two n-tiles) × dims 16kk..16kk+15.
    float s[MF][BLOCK_N / 8][4];  // [16·MF, BLOCK_N] scores, C fragments
#pragma unroll
    for (int mf = 0; mf < MF; ++mf)
#pragma unroll
      for (int j = 0; j < BLOCK_N / 8; ++j) s[mf][j][0] = s[mf][j][1] = s[mf][j][2] = s[mf][j][3] = 0.f;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      [[maybe_unused]] std::uint32_t qa[C::Q_IN_REGS ? 1 : MF][4];  // Q not in registers: read per k-step
      if constexpr (!C::Q_IN_REGS)
#pragma unroll
        for (int mf = 0; mf < MF; ++mf) load_q(qa[mf], mf, kk);
      // The A fragment of Q fragment mf at k-step kk, wherever it is.
      auto q_fragment = [&](int mf) -> const std::uint32_t(&)[4] {
        if constexpr (C::Q_IN_REGS)
          return qf[mf][kk];
        else
          return qa[mf];
      };
#pragma unroll
      for (int jj = 0; jj < BLOCK_N / 16; ++jj) {
        std::uint32_t b[4];  // matrices: keys +0..7 × dims +0..7, +0..7 × +8..15, +8..15 × +0..7, +8..15 × +8..15
        ldmatrix_x4(b, Kt + swz<D>(jj * 16 + lane % 8 + lane / 16 * 8, 2 * kk + lane / 8 % 2));
#pragma unroll
        for (int mf = 0; mf < MF; ++mf) {  // each K fragment feeds MF mma pairs
          mma_16816<T>(s[mf][2 * jj], q_fragment(mf), b[0], b[1]);
          mma_16816<T>(s[mf][2 * jj + 1], q_fragment(mf), b[2], b[3]);
        }
      }
    }

    // Mask the diagonal tiles only: keys past seq_k and (causal) keys after the query. Element e
    // of n-tile j is row g + 8·(e/2), key n0 + 8j + 2·t4 + e%2. The scores stay unscaled.
    if constexpr (decltype(masked)::value) {
#pragma unroll
      for (int mf = 0; mf < MF; ++mf)
#pragma unroll
        for (int j = 0; j < BLOCK_N / 8; ++j)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int row = m0 + w0 + 16 * mf + g + 8 * (e / 2), key = n0 + 8 * j + 2 * t4 + e % 2;
            if (key >= (causal ? min(row + 1, seq_k) : seq_k)) s[mf][j][e] = -INFINITY;
          }
    }

    // The online-softmax step of rows g (h = 0: elements 0, 1) and g + 8 (h = 1: elements 2, 3).
    // Two passes, so that the O rescale (MF·D/2 FMULs) is skipped when no row of the warp changed
    // its max (alpha = 1 for all): a warp-uniform branch. Pass 1: new max, alpha, l rescaled.
    bool moved = false;
    float alpha[MF][2];
#pragma unroll
    for (int mf = 0; mf < MF; ++mf)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float tile_max = -INFINITY;
#pragma unroll
        for (int j = 0; j < BLOCK_N / 8; ++j) tile_max = fmaxf(tile_max, fmaxf(s[mf][j][2 * h], s[mf][j][2 * h + 1]));
        const float m_new = fmaxf(m[mf][h], quad_max(tile_max));  // raw scores: scale > 0 keeps the argmax
        moved |= m_new != m[mf][h];
        alpha[mf][h] = exp2_approx((m[mf][h] - safe_shift(m_new)) * sl2);
        m[mf][h] = m_new;
        l[mf][h] *= alpha[mf][h];
      }
    if (__any_sync(0xffffffffu, moved)) {
#pragma unroll
      for (int mf = 0; mf < MF; ++mf)
#pragma unroll
        for (int j = 0; j < D / 8; ++j) {
          acc[mf][j][0] *= alpha[mf][0], acc[mf][j][1] *= alpha[mf][0];
          acc[mf][j][2] *= alpha[mf][1], acc[mf][j][3] *= alpha[mf][1];
        }
    }
    // Pass 2: P = 2^(s·sl2 − m·sl2), l += row sums.
#pragma unroll
    for (int mf = 0; mf < MF; ++mf)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const float shift = safe_shift(m[mf][h]) * sl2;
        float sum = 0.f;
#pragma unroll
        for (int j = 0; j < BLOCK_N / 8; ++j) {
          s[mf][j][2 * h] = exp2_approx(fmaf(s[mf][j][2 * h], sl2, -shift));
          s[mf][j][2 * h + 1] = exp2_approx(fmaf(s[mf][j][2 * h + 1], sl2, -shift));
          sum += s[mf][j][2 * h] + s[mf][j][2 * h + 1];
        }
        l[mf][h] += sum;  // this lane's keys only; the quad's sum is taken once, at the end
      }

    // O += P·V. The C fragments of n-tiles 2kk and 2kk+1 (keys 16kk..16kk+15) are, element for
    // element, the A fragment of k-step kk: the P operand is built in registers, no shuffle, no
    // shared memory. B[key][d] = V[key][d] needs 2 keys per register, but V rows hold dims side by
    // side: ldmatrix.trans reads 8 keys × 8 dims and hands each lane the transposed pairs.
#pragma unroll
    for (int kk = 0; kk < BLOCK_N / 16; ++kk) {
      std::uint32_t a[MF][4];
#pragma unroll
      for (int mf = 0; mf < MF; ++mf) {
        a[mf][0] = pack<T>(s[mf][2 * kk][0], s[mf][2 * kk][1]);
        a[mf][1] = pack<T>(s[mf][2 * kk][2], s[mf][2 * kk][3]);
        a[mf][2] = pack<T>(s[mf][2 * kk + 1][0], s[mf][2 * kk + 1][1]);
        a[mf][3] = pack<T>(s[mf][2 * kk + 1][2], s[mf][2 * kk + 1][3]);
      }
#pragma unroll
      for (int dd = 0; dd < D / 16; ++dd) {
        std::uint32_t b[4];  // matrices: keys +0..7 × dims +0..7, +8..15 × +0..7, +0..7 × +8..15, +8..15 × +8..15
        ldmatrix_x4_trans(b, Vt + swz<D>(kk * 16 + lane % 8 + lane / 8 % 2 * 8, 2 * dd + lane / 16));
#pragma unroll
        for (int mf = 0; mf < MF; ++mf) {  // each V fragment feeds MF mma pairs
          mma_16816<T>(acc[mf][2 * dd], a[mf], b[0], b[1]);
          mma_16816<T>(acc[mf][2 * dd + 1], a[mf], b[2], b[3]);
        }
      }
    }
  };
  int t = 0;
  for (; t < n_full; ++t) attend(t, std::false_type{});  // no mask
  for (; t < n_tiles; ++t) attend(t, std::true_type{});  // the diagonal and the ragged end of the keys
  cp_async_wait<0>();  // only empty groups are left; leave no copy pending at exit

  // O = acc / l into this warp's own rows of the Q tile (only this warp ever read them: a warp
  // barrier suffices), then 16-byte stores of whole rows: each 8-lane group writes 128 bytes.
  // LSE = m·scale + log l.
  __syncwarp();
  o += bh * seq_q * head_dim, lse += bh * seq_q;
#pragma unroll
  for (int mf = 0; mf < MF; ++mf)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float row_l = quad_sum(l[mf][h]);
      const float inv_l = row_l > 0.f ? 1.f / row_l : 0.f;
      const int r = w0 + 16 * mf + g + 8 * h;  // row in the block
#pragma unroll
      for (int j = 0; j < D / 8; ++j)  // element (r, 8j + 2·t4): chunk j, 4 bytes at 4·t4
        *reinterpret_cast<std::uint32_t*>(Qs + swz<D>(r, j) + 2 * t4) =
            pack<T>(acc[mf][j][2 * h] * inv_l, acc[mf][j][2 * h + 1] * inv_l);
      if (t4 == 0 && m0 + r < seq_q) lse[m0 + r] = row_l > 0.f ? m[mf][h] * scale + logf(row_l) : -INFINITY;
    }
  __syncwarp();
  constexpr int CHUNKS = D / 8;
#pragma unroll
  for (int i = lane; i < 16 * MF * CHUNKS; i += kWarp) {
    const int r = w0 + i / CHUNKS, c = i % CHUNKS;
    if (m0 + r < seq_q && 8 * c < head_dim)
      *reinterpret_cast<uint4*>(o + std::size_t(m0 + r) * head_dim + 8 * c) =
          *reinterpret_cast<const uint4*>(Qs + swz<D>(r, c));
  }
}

// ---- launcher, candidates and the autotuner ------------------------------------------------------------
template <class T, class C>
void launch(const fa::AttnFwdArgs& a, cudaStream_t stream) {
  static const bool ready = [] {  // once per instance: more than 48 KB of dynamic shared memory
    fa::opt_in_shared_memory(tc_forward<T, C>, C::SMEM_BYTES, info().name);
    return true;
  }();
  (void)ready;
  const fa::AttnParams& p = a.p;
  const dim3 grid((p.seq_q + C::BLOCK_M - 1) / C::BLOCK_M, p.batch * p.heads);
  tc_forward<T, C><<<grid, C::THREADS, C::SMEM_BYTES, stream>>>(
      static_cast<const T*>(a.q), static_cast<const T*>(a.k), static_cast<const T*>(a.v), static_cast<T*>(a.o),
      a.lse, p.seq_q, p.seq_k, p.head_dim, p.scale, p.causal, p.heads / fa::kv_heads_of(p));
  FA_CHECK_LAUNCH();
}

using Candidate = fa::TuneCandidate<fa::AttnFwdArgs>;

// The candidates (name: w WARPS, m MF, n BLOCK_N, s STAGES, q if Q stays in registers). Each
// head_dim keeps FA2's tile shape, a second 32-rows-per-warp shape and step 10's 64-row shape
// (more blocks when a problem has few query rows). Dropped after the measurements of docs/11,
// because they lost on every benchmark shape: w8 (8 warps × 16 rows) at both head dims, and
// w4m2n128s2q at d = 64 (Q in registers beside a 128-key S tile: ptxas spills 224 bytes).
template <class T>
const std::vector<Candidate>& candidates(int d) {
  static const std::vector<Candidate> d64 = {
      {"w4m2n128s2", launch<T, Config<64, 4, 2, 128, 2, false>>},  // FA2's shape: 128 × 128, 4 warps
      {"w4m2n64s3q", launch<T, Config<64, 4, 2, 64, 3, true>>},
      {"w4m1n64s3q", launch<T, Config<64, 4, 1, 64, 3, true>>},  // step 10's shape
  };
  static const std::vector<Candidate> d128 = {
      {"w4m2n64s2", launch<T, Config<128, 4, 2, 64, 2, false>>},  // FA2's shape: 128 × 64, 4 warps
      {"w4m2n32s3", launch<T, Config<128, 4, 2, 32, 3, false>>},
      {"w4m1n64s2q", launch<T, Config<128, 4, 1, 64, 2, true>>},  // step 10's shape, 2 stages
  };
  return d <= 64 ? d64 : d128;
}

// The autotuner (host/autotune.h, AttnAutotuner), one cache per element type. A problem class is
// (head_dim instance, causal, seq_q bucket, seq_k bucket), buckets being powers of two (…, 1024, 2048,
// …): the best tile shape depends on how many key tiles a block walks and on how many blocks fill the
// GPU, both set by the lengths. The first launch of a class times every candidate on the caller's own
// buffers and remembers the winner for the process. FA_STEP11_CONFIG=<name> pins a candidate
// (profiling, tests).
fa::AttnAutotuner<fa::AttnFwdArgs>& tuner() {
  static fa::AttnAutotuner<fa::AttnFwdArgs> t(info().name, "FA_STEP11_CONFIG", candidates<__half>,
                                              candidates<__nv_bfloat16>, /*by_variant=*/false);
  return t;
}

void forward(const fa::AttnFwdArgs& a, cudaStream_t stream) {
  fa::check_attention_launch(info(), a.p, {a.q, a.k, a.v, a.o}, "Q, K, V and O");
  tuner().launch(a, stream);
}

// Tunes the problem class of `a` now, on its buffers (e.g. before capturing launches in a CUDA
// graph, where the first launch of a class could not time the candidates).
void tune(const fa::AttnFwdArgs& a, cudaStream_t stream) {
  fa::check_attention_launch(info(), a.p, {a.q, a.k, a.v, a.o}, "Q, K, V and O");
  tuner().tune(a, stream);
}

// For the tests, which pin each candidate in turn (FA_STEP11_CONFIG).
int candidate_count(int head_dim) { return tuner().candidate_count(head_dim); }
std::string candidate_name(int head_dim, int i) { return tuner().candidate_name(head_dim, i); }

const fa::StepInfo& info() {
  static const fa::StepInfo i = [] {
    fa::StepInfo s{"11_tuned_forward",
                   "tile shapes as template instances, picked per problem by a cached autotuner; trimmed inner loop",
                   fa::Family::Attention};
    s.attn_fwd = forward;
    s.attn_rule = {{fa::DType::F16, fa::DType::BF16}, 128, 8};
    s.attn_rule.positive_scale = true;
    s.attn_rule.gqa = true;  // grouped-query attention: each query head reads its group's K/V head
    return s;
  }();
  return i;
}

}  // namespace step11
