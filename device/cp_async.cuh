// cp_async.cuh: what step 10 teaches, one function per instruction, for the steps after it to
// include (11, ...): the cp.async copies global -> shared memory, the XOR-swizzled index those
// copies (and ldmatrix) go through, and ex2.approx, the exponential of the softmax from step 10
// on. Step 10 writes them out inline in its kernel.cu, where they are explained
// (docs/10_swizzle_pipeline_forward.md draws the swizzle). Beside mma_sync.cuh (step 09); the
// mbarrier, TMA and wgmma instructions of steps 17-19 get headers of their own here.
//
// Namespace fa::ptx: one-to-one wrappers, `__device__ __forceinline__`, no policy. A step takes
// them in with `using namespace fa::ptx;` inside its own namespace.
//
//   cp_async_16(smem, gmem, n)    cp.async.cg.shared.global, 16 bytes (n = 0: 16 zero bytes)
//   cp_async_commit()             cp.async.commit_group
//   cp_async_wait<N>()            cp.async.wait_group N
//   exp2_approx(x)                ex2.approx.ftz.f32 (one MUFU.EX2)
//   swz<D>(r, c)                  element offset of row r, 16-byte chunk c in a swizzled [ROWS, D] tile
#pragma once
#include <cstdint>

namespace fa::ptx {

// cp.async.cg: 16 bytes global -> shared memory without passing through registers (and without
// allocating in L1: .cg). src_bytes = 0 writes 16 zero bytes and reads nothing (rows past seq).
// Copies are grouped with commit_group; wait_group<N> waits until at most N of this thread's
// groups are still in flight.
__device__ __forceinline__ void cp_async_16(void* smem, const void* gmem, int src_bytes) {
  const auto a = static_cast<std::uint32_t>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(a), "l"(gmem), "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// 2^x on the special-function unit (one MUFU.EX2; 2^-inf = 0).
__device__ __forceinline__ float exp2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// Element offset of (row r, 16-byte chunk c) in a [ROWS, D] tile of 16-bit elements: the chunk
// moves to c ^ (r % 8) within its row, so the 8 rows an ldmatrix phase reads hit 8 different
// chunk positions (all 32 banks once). For D = 128 (16 chunks) the XOR flips only the low 3 bits:
// a chunk stays in its half of the row.
template <int D>
__device__ __forceinline__ int swz(int r, int c) {
  return r * D + ((c ^ (r & 7)) << 3);
}

}  // namespace fa::ptx
