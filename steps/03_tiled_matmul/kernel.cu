// =============================================================================================
// FlashAttention from scratch, step by step, in CUDA C++
// Step 03: tiled matmul, shared-memory tiling + register blocking, fp32
//
// Where it sits: steps 01-02 built the softmax; attention also needs two matrix products per
// head, S = Q·Kᵀ and O = P·V (and Pᵀ·dO in the backward). This is the first matmul of the series
// and the one step 04 (naive attention) calls. No tensor cores yet (they arrive in step 09).
//
// The idea: one thread per element of C, each reading its row of A and column of B from global
// memory, moves 8 bytes per FMA (2 FLOPs): 0.25 FLOP/byte, where an H100 needs about 22 (its FP32
// rate over its bandwidth: doc 03) to keep its FP32 pipes busy. A block that computes a BM×BN tile of C instead
// stages BK-wide slabs of A [BM×BK] and B [BK×BN] in shared memory: each float it reads from
// global memory is used BN (or BM) times, so the block does 2·BM·BN·BK FLOPs per 4·(BM+BN)·BK
// bytes, BM·BN / (2·(BM+BN)) = 32 FLOP/byte at 128×128. One level down, each thread keeps an
// 8×8 tile of C in registers and reads 8 + 8 floats from shared memory per 64 FMAs, so shared
// memory is not the bottleneck either: the FMA pipe is.
//
// Parallel layout: one block per BM×BN tile of C (grid.x walks the tiles in groups of kGroupM
// tile rows, for L2 reuse), grid.z = batch. 128×128 tiles with 256 threads, or 128×64 tiles with
// 128 threads when N ≤ 64 (attention's O = P·V) or the big tiles would leave SMs idle. Every
// thread: an 8×8 register tile of C. Shared memory double-buffered; the next slab's global loads
// are issued before the FMAs on the current slab, so their latency hides under the math.
//
// Layouts (row-major, see host/ops.h): NT C = A·Bᵀ (S = Q·Kᵀ), NN C = A·B (O = P·V),
// TN C = Aᵀ·B (dV = Pᵀ·dO). Only the global→shared loaders differ; the FMA loop is shared.
//
// Build + run:  cmake --build build --target 03_tiled_matmul && build/bin/03_tiled_matmul
// Read with:    docs/03_tiled_matmul.md
// =============================================================================================
#include <cuda_runtime.h>

#include <cstdint>

#include "check.h"
#include "launch.h"
#include "ops.h"

namespace step03 {

using fa::MatmulLayout;

constexpr int kWarp = 32;
constexpr int kGroupM = 8;                 // tile rows per group in the block order (L2 reuse, see tile_coords)
constexpr int kMaxDim = 0x7fffffff - 256;  // M, N, K: indices up to a tile past the edge fit in int

// ---- tile configuration -------------------------------------------------------------------------
// A block computes a BM×BN tile of C, walking K in slabs of BK. Its threads form a
// (BM/8)×(BN/8) grid, each owning an 8×8 register tile of C made of 2×2 sub-tiles of 4×4,
// BM/2 rows and BN/2 columns apart (see the picture at the FMA loop).
template <int BM_, int BN_, int THREADS_, int MIN_BLOCKS_>
struct Tile {
  static constexpr int BM = BM_, BN = BN_;
  static constexpr int BK = 8;    // K per slab: one float4 of A and one of B per thread per slab (128×128)
  static constexpr int TM = 8;    // rows of C per thread
  static constexpr int TN = 8;    // columns of C per thread
  static constexpr int kPad = 4;  // floats of padding per smem row: conflict-free transposed stores
  static constexpr int kThreads = THREADS_;
  static constexpr int kMinBlocks = MIN_BLOCKS_;  // resident blocks per SM the registers must allow
  static constexpr int kThreadRows = BM / TM;     // thread grid
  static constexpr int kThreadCols = BN / TN;
  static constexpr int kWarpRows = 8, kWarpCols = 4;  // a warp's 32 lanes as 8×4 threads of the grid

  static_assert(kThreadRows * kThreadCols == kThreads, "one thread per 8×8 tile of C");
  static_assert(TM == 8 && TN == 8, "a thread tile is 2×2 sub-tiles of 4×4 (float4 reads of A and B)");
  static_assert(kThreadRows % kWarpRows == 0 && kThreadCols % kWarpCols == 0, "warps tile the thread grid");
  static_assert(BK % 4 == 0, "a K-contiguous slab row is whole float4s");
  static_assert((BM + kPad) % 4 == 0 && (BN + kPad) % 4 == 0, "smem rows start on 16 bytes (ld.shared.v4)");
  static_assert(BM % 32 == 0 && BN % 32 == 0 && kPad == 4,
                "transposed stores are conflict-free when a row is 4 banks off a multiple of 32 floats");
  static_assert(kThreads * kMinBlocks <= 2048 && 65536 / (kThreads * kMinBlocks) >= 128,
                "kMinBlocks blocks fit on an SM with >= 128 registers per thread: 64 accumulators, "
                "16 operands, the prefetched quads and the addresses");
};
// 128×128: 32 FLOP per byte of global traffic, 16.5 KB smem, 2 blocks (16 warps) per SM at <= 128
// registers. 128×64: 21 FLOP/byte, for N <= 64 (O = P·V) and for grids too small to fill the SMs.
// It loads 2 quads of A per thread per slab (4 more live registers than 128×128), which at 4
// blocks (<= 128 registers) spills; 3 blocks give it up to 168, and 12 warps per SM, each with
// 64 independent FMAs per k, still hide the shared-memory latency.
using BigTile = Tile<128, 128, 256, 2>;
using NarrowTile = Tile<128, 64, 128, 3>;

// ---- global → shared tile loaders ---------------------------------------------------------------
// One operand's slab: R rows (R = BM for A, BN for B) by BK values of K, stored in smem as
// [BK][R + kPad], k-major, so the FMA loop reads 4 consecutive rows of A (or columns of B) with
// one float4 for every layout. In global memory the slab is one of two shapes:
//   K-contiguous  element (r, k) at g[r·ld + k]  A of NT and NN ([M, K]), B of NT ([N, K])
//   R-contiguous  element (r, k) at g[k·ld + r]  A of TN ([K, M]), B of NN and TN ([K, N])
// Each thread moves kPerThread groups of 4 consecutive floats ("quads") per slab. VEC = 4 loads a
// quad with one 16-byte load; VEC = 1 with four scalar loads (unaligned operands, ld % 4 != 0).
// Past the matrix (rows ≥ rows_total or k ≥ K) the loader puts zeros: they add nothing to C.
template <bool K_CONTIGUOUS, int R, int VEC, class T>
struct SlabLoader {
  static constexpr int kQuads = R * T::BK / 4;                            // [R][BK] slab as quads
  static constexpr int kPerThread = kQuads / T::kThreads;                 // quads per thread per slab
  static constexpr int kQuadsPerLine = K_CONTIGUOUS ? T::BK / 4 : R / 4;  // quads per global row of the slab
  static constexpr int kLinesPerPass = T::kThreads / kQuadsPerLine;       // global rows the block covers per pass
  static_assert(kQuads % T::kThreads == 0, "every thread loads the same number of quads");
  static_assert(T::kThreads % kQuadsPerLine == 0, "a pass of the block covers whole rows of the slab");
  static_assert(VEC == 1 || VEC == 4, "scalar or float4 loads");

  const float* g;  // this thread's first quad in the current slab
  int line, quad;  // this thread's first row of the slab in global memory, and its quad in that row
  int r;           // the row (m or n) of this thread's first quad's first element
  int rows_total, K, ld;

  // g0: the operand of this batch entry; r0: the block's first row (m0 or n0); ld: the operand's
  // leading dimension (K if K-contiguous, else M or N).
  __device__ SlabLoader(const float* g0, int r0, int rows_total_, int K_, int ld_)
      : line(threadIdx.x / kQuadsPerLine), quad(threadIdx.x % kQuadsPerLine), rows_total(rows_total_), K(K_), ld(ld_) {
    if constexpr (K_CONTIGUOUS) {  // a line is a row r, the quad runs along k
      r = r0 + line;
      g = g0 + (long long)r * ld + quad * 4;
    } else {  // a line is a k, the quad runs along r
      r = r0 + quad * 4;
      g = g0 + (long long)line * ld + r;
    }
  }

  // Registers ← global, for the slab starting at k0. q[i]: quad i, zero where outside.
  __device__ void load(float4 (&q)[kPerThread], int k0) const {
#pragma unroll
    for (int i = 0; i < kPerThread; ++i) {
      // Quad i is i·kLinesPerPass rows of the operand further on. (Steps are recomputed from ld
      // rather than kept: ld is a kernel parameter, so they cost no registers.)
      const float* p = g + (long long)ld * (i * kLinesPerPass);
      // (r, k) of the quad's first element; the quad runs along k (K-contiguous) or along r.
      const int ri = K_CONTIGUOUS ? r + i * kLinesPerPass : r;
      const int k = K_CONTIGUOUS ? k0 + quad * 4 : k0 + line + i * kLinesPerPass;
      if constexpr (VEC == 4) {
        // ld % 4 == 0 (launcher), so a quad is either wholly inside the matrix or wholly outside.
        const bool inside = ri < rows_total && k < K;
        q[i] = inside ? *reinterpret_cast<const float4*>(p) : make_float4(0.f, 0.f, 0.f, 0.f);
      } else {
        float v[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const bool inside = K_CONTIGUOUS ? (ri < rows_total && k + j < K) : (ri + j < rows_total && k < K);
          v[j] = inside ? p[j] : 0.f;
        }
        q[i] = make_float4(v[0], v[1], v[2], v[3]);
      }
    }
  }

  // Shared ← registers. s: [BK][R + kPad] smem, k-major.
  __device__ void store(float (*s)[R + T::kPad], const float4 (&q)[kPerThread]) const {
#pragma unroll
    for (int i = 0; i < kPerThread; ++i) {
      if constexpr (K_CONTIGUOUS) {
        // The quad runs along k: transpose it into one column of s, 4 scalar stores. A warp
        // writes 16 rows × 2 quads; the padding shifts the second quad's rows by 16 banks, so
        // the 32 stores of each instruction hit 32 different banks.
        const int row = line + i * kLinesPerPass, k = quad * 4;
        s[k + 0][row] = q[i].x;
        s[k + 1][row] = q[i].y;
        s[k + 2][row] = q[i].z;
        s[k + 3][row] = q[i].w;
      } else {
        // The quad runs along r: it is already a row segment of s, one 16-byte store.
        *reinterpret_cast<float4*>(&s[line + i * kLinesPerPass][quad * 4]) = q[i];
      }
    }
  }

  __device__ void next_slab() { g += K_CONTIGUOUS ? (long long)T::BK : (long long)ld * T::BK; }
};

// Which operand is stored how, per layout.
template <MatmulLayout L>
struct LayoutTraits {
  static constexpr bool kAKContiguous = L != MatmulLayout::TN;  // A [M, K] (NT, NN) or [K, M] (TN)
  static constexpr bool kBKContiguous = L == MatmulLayout::NT;  // B [N, K] (NT) or [K, N] (NN, TN)
};

// ---- block order ---------------------------------------------------------------------------------
// Blocks run roughly in the order of blockIdx.x. Row-by-row order would stream all of B for every
// tile row of C; grouping kGroupM tile rows makes the blocks in flight share A and B slabs in L2.
__device__ void tile_coords(int tiles_m, int tiles_n, int& tm, int& tn) {
  const int per_group = kGroupM * tiles_n;
  const int group = blockIdx.x / per_group, first_m = group * kGroupM;
  const int rows_in_group = tiles_m - first_m < kGroupM ? tiles_m - first_m : kGroupM;
  const int within = blockIdx.x % per_group;
  tm = first_m + within % rows_in_group;
  tn = within / rows_in_group;
}

// ---- the kernel -----------------------------------------------------------------------------------
// C[M, N] = alpha · op(A) · op(B) for batch entry blockIdx.z; vec_c: C rows are 16-byte aligned.
template <MatmulLayout L, int VEC_A, int VEC_B, class T>
__global__ void __launch_bounds__(T::kThreads, T::kMinBlocks)
    sgemm(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C, int M, int N, int K,
          float alpha, long long stride_a, long long stride_b, long long stride_c, bool vec_c) {
  constexpr int BM = T::BM, BN = T::BN, BK = T::BK, kPad = T::kPad;
  using Traits = LayoutTraits<L>;
  __shared__ __align__(16) float As[2][BK][BM + kPad];  // [2][BK][BM] smem, A slab transposed (k-major), 2 buffers
  __shared__ __align__(16) float Bs[2][BK][BN + kPad];  // [2][BK][BN] smem, B slab k-major, 2 buffers

  int tm, tn;
  tile_coords((M + BM - 1) / BM, (N + BN - 1) / BN, tm, tn);
  const int m0 = tm * BM, n0 = tn * BN;
  A += blockIdx.z * stride_a;
  B += blockIdx.z * stride_b;

  SlabLoader<Traits::kAKContiguous, BM, VEC_A, T> a_loader(A, m0, M, K, Traits::kAKContiguous ? K : M);
  SlabLoader<Traits::kBKContiguous, BN, VEC_B, T> b_loader(B, n0, N, K, Traits::kBKContiguous ? K : N);
  float4 a_quads[decltype(a_loader)::kPerThread];  // [kPerThread] quads: the next A slab in flight
  float4 b_quads[decltype(b_loader)::kPerThread];  // [kPerThread] quads: the next B slab in flight

  // This thread's place in the thread grid. A warp is an 8×4 patch of it, so per k its A reads
  // are 8 distinct float4 (128 contiguous bytes) and its B reads 4 (64 bytes); lanes that want
  // the same float4 get it by broadcast. No bank conflicts, and few bytes per FMA.
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  constexpr int kWarpsAcross = T::kThreadCols / T::kWarpCols;
  const int ty = (warp / kWarpsAcross) * T::kWarpRows + lane / T::kWarpCols;  // 0 .. BM/8-1
  const int tx = (warp % kWarpsAcross) * T::kWarpCols + lane % T::kWarpCols;  // 0 .. BN/8-1

  float acc[T::TM][T::TN] = {};  // [8][8] registers: this thread's tile of C

  // Prologue: slab 0 into buffer 0.
  a_loader.load(a_quads, 0);
  b_loader.load(b_quads, 0);
  a_loader.store(As[0], a_quads);
  b_loader.store(Bs[0], b_quads);
  __syncthreads();

  const int slabs = (K + BK - 1) / BK;
  for (int s = 0; s < slabs; ++s) {
    const int cur = s & 1;
    const bool more = s + 1 < slabs;
    // Issue the next slab's global loads now; nothing waits for them until the stores below,
    // so their latency (hundreds of cycles) overlaps the 512 FMAs per thread of this slab.
    if (more) {
      a_loader.next_slab();
      b_loader.next_slab();
      a_loader.load(a_quads, (s + 1) * BK);
      b_loader.load(b_quads, (s + 1) * BK);
    }

    // The FMA loop, the same for every layout. Thread (ty, tx) owns rows {ty·4 .. ty·4+3} and
    // {BM/2 + ty·4 ..} of the tile, columns {tx·4 .. tx·4+3} and {BN/2 + tx·4 ..}:
    //
    //            cols tx·4..+3       cols BN/2+tx·4..+3
    //   rows ty·4..     acc[0..3][0..3]    acc[0..3][4..7]
    //   rows BM/2+ty·4  acc[4..7][0..3]    acc[4..7][4..7]
    //
    // so each of its 4 operands per k is one aligned float4 of a smem row (ld.shared.v4).
#pragma unroll
    for (int k = 0; k < BK; ++k) {
      float a[T::TM], b[T::TN];  // [8] + [8] registers: a column of A's 8 rows, a row of B's 8 columns
      *reinterpret_cast<float4*>(&a[0]) = *reinterpret_cast<const float4*>(&As[cur][k][ty * 4]);
      *reinterpret_cast<float4*>(&a[4]) = *reinterpret_cast<const float4*>(&As[cur][k][BM / 2 + ty * 4]);
      *reinterpret_cast<float4*>(&b[0]) = *reinterpret_cast<const float4*>(&Bs[cur][k][tx * 4]);
      *reinterpret_cast<float4*>(&b[4]) = *reinterpret_cast<const float4*>(&Bs[cur][k][BN / 2 + tx * 4]);
      // 64 FMAs per 4 shared loads: the outer product of a and b.
#pragma unroll
      for (int i = 0; i < T::TM; ++i)
#pragma unroll
        for (int j = 0; j < T::TN; ++j) acc[i][j] += a[i] * b[j];
    }

    // The other buffer was last read in iteration s - 1, before the barrier that ended it.
    if (more) {
      a_loader.store(As[cur ^ 1], a_quads);
      b_loader.store(Bs[cur ^ 1], b_quads);
    }
    // One barrier per slab: slab s+1 is complete in smem, and nobody still reads buffer cur
    // when iteration s+1 overwrites it.
    __syncthreads();
  }

  // Epilogue: C = alpha · acc, guarded at the matrix edge. With vec_c (N % 4 == 0, C aligned) a
  // quad of columns is wholly inside or outside, and goes out as one 16-byte store.
  C += blockIdx.z * stride_c;  // this batch entry's C [M, N]
#pragma unroll
  for (int i = 0; i < T::TM; ++i) {
    const int row = m0 + (i / 4) * (BM / 2) + ty * 4 + i % 4;
    if (row >= M) continue;
    float* c_row = C + (long long)row * N;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int col = n0 + h * (BN / 2) + tx * 4;
      const float* v = &acc[i][h * 4];  // [4] this quad of columns
      if (vec_c) {
        if (col < N)
          *reinterpret_cast<float4*>(c_row + col) = make_float4(alpha * v[0], alpha * v[1], alpha * v[2], alpha * v[3]);
      } else {
#pragma unroll
        for (int j = 0; j < 4; ++j)
          if (col + j < N) c_row[col + j] = alpha * v[j];
      }
    }
  }
}

// ---- launch configuration ----------------------------------------------------------------------------
// 16-byte loads of an operand need every row of every batch entry to start on 16 bytes: an
// aligned base, a leading dimension and a batch stride that are multiples of 4 floats.
inline bool rows_aligned(const void* p, int ld, long long stride, int batch) {
  return reinterpret_cast<std::uintptr_t>(p) % 16 == 0 && ld % 4 == 0 && (batch == 1 || stride % 4 == 0);
}

template <MatmulLayout L, int VEC_A, int VEC_B, class T>
void launch_kernel(const fa::MatmulArgs& a, bool vec_c, cudaStream_t stream) {
  const long long tiles = (long long)((a.M + T::BM - 1) / T::BM) * ((a.N + T::BN - 1) / T::BN);
  if (tiles > 0x7fffffff) throw fa::UsageError("matmul: too many tiles for one grid");
  const dim3 grid(unsigned(tiles), 1, unsigned(a.batch));
  sgemm<L, VEC_A, VEC_B, T><<<grid, T::kThreads, 0, stream>>>(a.A, a.B, a.C, a.M, a.N, a.K, a.alpha, a.stride_a,
                                                              a.stride_b, a.stride_c, vec_c);
  FA_CHECK_LAUNCH();
}

template <MatmulLayout L, class T>
void launch_tile(const fa::MatmulArgs& a, cudaStream_t stream) {
  using Traits = LayoutTraits<L>;
  const bool vec_a = rows_aligned(a.A, Traits::kAKContiguous ? a.K : a.M, a.stride_a, a.batch);
  const bool vec_b = rows_aligned(a.B, Traits::kBKContiguous ? a.K : a.N, a.stride_b, a.batch);
  const bool vec_c = rows_aligned(a.C, a.N, a.stride_c, a.batch);
  // Each operand picks its own load width: P·V with an odd sequence length still loads V with float4.
  if (vec_a && vec_b)
    launch_kernel<L, 4, 4, T>(a, vec_c, stream);
  else if (vec_a)
    launch_kernel<L, 4, 1, T>(a, vec_c, stream);
  else if (vec_b)
    launch_kernel<L, 1, 4, T>(a, vec_c, stream);
  else
    launch_kernel<L, 1, 1, T>(a, vec_c, stream);
}

template <MatmulLayout L>
void launch_layout(const fa::MatmulArgs& a, cudaStream_t stream) {
  // 128×128 tiles unless N ≤ 64 (half of every tile would be padding) or they would leave SMs
  // idle (fewer tiles than SMs): then 128×64, twice as many blocks.
  const long long big_tiles =
      (long long)((a.M + BigTile::BM - 1) / BigTile::BM) * ((a.N + BigTile::BN - 1) / BigTile::BN) * a.batch;
  if (a.N <= NarrowTile::BN || big_tiles < fa::sm_count())
    launch_tile<L, NarrowTile>(a, stream);
  else
    launch_tile<L, BigTile>(a, stream);
}

void launch(const fa::MatmulArgs& a, cudaStream_t stream) {
  if (a.M < 1 || a.N < 1 || a.K < 1 || a.batch < 1) throw fa::UsageError("matmul needs M, N, K and batch >= 1");
  if (a.batch > 65535) throw fa::UsageError("matmul: batch > 65535 (the grid's z limit)");
  // Tile arithmetic (last tile's first row + 127, K rounded up to slabs) stays in int.
  if (a.M > kMaxDim || a.N > kMaxDim || a.K > kMaxDim) throw fa::UsageError("matmul: M, N and K must be < 2^31 - 256");
  switch (a.layout) {
    case MatmulLayout::NT:
      return launch_layout<MatmulLayout::NT>(a, stream);
    case MatmulLayout::NN:
      return launch_layout<MatmulLayout::NN>(a, stream);
    case MatmulLayout::TN:
      return launch_layout<MatmulLayout::TN>(a, stream);
  }
  throw fa::UsageError("matmul: unknown layout");
}

const fa::StepInfo& info() {
  static const fa::StepInfo i{"03_tiled_matmul", "fp32 GEMM: shared-memory tiles + 8x8 register tiles, double-buffered",
                              fa::Family::Matmul, nullptr, launch};
  return i;
}

}  // namespace step03
