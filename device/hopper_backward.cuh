// hopper_backward.cuh: what the Hopper backward steps teach inline (20, 21; 16 for the counter's
// acquire and release), for the steps after them to include (24 on):
//
//   wgmma_tt<N, T>(d, desc_a, desc_b, accumulate)   D[64, N] (+)= A·B, N = 32 or 64, A and B both MN-major in smem (20)
//   bulk_reduce_add(dst, src, bytes)      cp.reduce.async.bulk .add.f32: smem -> global, by the bulk copy engine (21)
//   bulk_commit(), bulk_wait_read(), bulk_wait()   close a bulk group; wait until its sources are read, or done
//   ld_acquire(p), add_release(p, v)      a gpu-scope counter: acquire load, release add (16)
//   fence_proxy_async_global()            order generic-proxy global accesses with the async proxy's
//
// Namespace fa::ptx, one-to-one wrappers, no policy; sm_90a only. A step that teaches one of these keeps its
// own copy in its namespace (docs/conventions.md, "Inline first, shared later"), which hides this one.
#pragma once
#include "hopper.cuh"

namespace fa::ptx {

// D[64, N] = A·B or D += A·B, A [64, 16] MN-major and B [16, N] MN-major in shared memory: dQ = dS·K with
// dS stored as dSᵀ [keys][queries] and K as [keys][dims]. The two 1s before the closing brace are
// imm-trans-a and imm-trans-b (16-bit types only). N = 64: one 64-dim box of K; N = 32: half a 128-byte
// swizzle row of K, the descriptor starting 64 bytes into it (the swizzle is a function of the address).
template <int N, class T>
__device__ __forceinline__ void wgmma_tt(float (&d)[N / 2], std::uint64_t desc_a, std::uint64_t desc_b, int accumulate) {
  static_assert(N == 32 || N == 64, "N = 32 or 64 here");
  constexpr bool kF16 = std::is_same_v<T, __half>;
#define FA_WGMMA_TT(SHAPE, TY, LIST, A, B, S)                                                             \
  "{\n.reg .pred p;\nsetp.ne.b32 p, " S ", 0;\nwgmma.mma_async.sync.aligned." SHAPE ".f32." TY "." TY " {" LIST \
  "}, " A ", " B ", p, 1, 1, 1, 1;\n}\n"
#define FA_WGMMA_P16 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15"
#define FA_WGMMA_D16                                                                                    \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), \
      "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
#define FA_WGMMA_TT_AB "l"(desc_a), "l"(desc_b), "r"(accumulate)
  if constexpr (N == 64 && kF16)
    asm volatile(FA_WGMMA_TT("m64n64k16", "f16", FA_WGMMA_P32, "%32", "%33", "%34") : FA_WGMMA_D32 : FA_WGMMA_TT_AB);
  else if constexpr (N == 64)
    asm volatile(FA_WGMMA_TT("m64n64k16", "bf16", FA_WGMMA_P32, "%32", "%33", "%34") : FA_WGMMA_D32 : FA_WGMMA_TT_AB);
  else if constexpr (kF16)
    asm volatile(FA_WGMMA_TT("m64n32k16", "f16", FA_WGMMA_P16, "%16", "%17", "%18") : FA_WGMMA_D16 : FA_WGMMA_TT_AB);
  else
    asm volatile(FA_WGMMA_TT("m64n32k16", "bf16", FA_WGMMA_P16, "%16", "%17", "%18") : FA_WGMMA_D16 : FA_WGMMA_TT_AB);
#undef FA_WGMMA_TT
#undef FA_WGMMA_P16
#undef FA_WGMMA_D16
#undef FA_WGMMA_TT_AB
}

// `bytes` (a multiple of 16) of fp32 at shared address src added element-wise to global dst (both 16-byte
// aligned), each element's add a relaxed gpu-scope atomic that flushes subnormals. One thread issues it; it
// completes in a bulk group: commit, then wait_group.read before the source is rewritten, wait_group for the
// writes themselves (PTX ISA, "cp.reduce.async.bulk").
__device__ __forceinline__ void bulk_reduce_add(float* dst, std::uint32_t src, std::uint32_t bytes) {
  asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\n" ::"l"(dst), "r"(src),
               "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
__device__ __forceinline__ void bulk_wait_read() { asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory"); }
__device__ __forceinline__ void bulk_wait() { asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory"); }

// A counter in global memory that orders other blocks' writes: the reader's acquire load, the writer's
// release add (the fence makes every earlier write of this thread visible before the add).
__device__ __forceinline__ unsigned ld_acquire(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void add_release(unsigned* p, unsigned v) {
  asm volatile("fence.acq_rel.gpu;\n\tred.relaxed.gpu.global.add.u32 [%0], %1;\n" ::"l"(p), "r"(v) : "memory");
}
// The bulk copy engine's writes belong to the async proxy: this fence orders them with the counter's
// generic-proxy accesses, on each side.
__device__ __forceinline__ void fence_proxy_async_global() { asm volatile("fence.proxy.async.global;\n" ::: "memory"); }

}  // namespace fa::ptx
