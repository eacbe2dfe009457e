// hopper.cuh: what step 17 teaches, one function per instruction, for the steps after it to
// include (18, ...): the mbarrier (a shared-memory barrier that also counts bytes), the bulk
// tensor copy (TMA: a whole tile global -> shared memory by one thread, described by a tensor
// map), the async-proxy fence, and the warpgroup matrix multiply-accumulate (wgmma) with its
// shared-memory matrix descriptor. docs/17_hopper_forward.md explains each, bit by bit where it
// matters (the descriptor, the accumulator layout, the phase parity).
//
// Namespace fa::ptx, as cp_async.cuh and mma_sync.cuh: one-to-one wrappers, no policy. sm_90a
// only (wgmma): a step that includes this is built with ARCH 90a.
//
//   smem_addr(p)                         the 32-bit shared-memory address of a generic pointer
//   mbarrier_init(bar, count)            mbarrier.init: phase 0, `count` arrivals expected
//   fence_barrier_init()                 make the inits visible to the other threads and to the TMA unit
//   mbarrier_arrive_expect_tx(bar, n)    one arrival, and n more bytes the phase waits for
//   mbarrier_wait(bar, parity)           spin until the phase of that parity has completed
//   tma_load_3d(dst, map, bar, c0, c1, c2)  cp.async.bulk.tensor.3d: one box -> smem, bytes counted on bar
//   fence_proxy_async()                  order this thread's generic smem writes before async-proxy reads
//   wgmma_fence(), wgmma_commit(), wgmma_wait<N>()
//   smem_desc(addr, lbo, sbo)            a wgmma matrix descriptor, 128-byte swizzle
//   wgmma_ss<N, T>(d, desc_a, desc_b, accumulate)      D[64, N] (+)= A·B, A and B K-major in smem
//   wgmma_rs<N, T>(d, a, desc_b, accumulate)           D[64, N] (+)= A·B, A in registers, B MN-major
//
// What steps 18-19 add (warp specialisation; 19: the named barriers of ping-pong):
//   mbarrier_arrive(bar)                 one plain arrival: a consumer hands a slot back
//   named_barrier_sync(id, n), named_barrier_arrive(id, n)   bar.sync / bar.arrive on barrier id 1-15
//   setmaxnreg_dec<N>(), setmaxnreg_inc<N>()                 shrink / grow this warpgroup's registers
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

namespace fa::ptx {

__device__ __forceinline__ std::uint32_t smem_addr(const void* p) {
  return static_cast<std::uint32_t>(__cvta_generic_to_shared(p));
}

// ---- mbarrier ----------------------------------------------------------------------------------------
// A 64-bit object in shared memory with a phase bit, a count of arrivals still expected and a count
// of transaction bytes still expected. A phase completes when both reach zero; the barrier then
// re-arms itself for the next phase (same arrival count) and flips its phase bit.
__device__ __forceinline__ void mbarrier_init(std::uint64_t* bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(count));
}
// After the inits, before any other thread or the TMA unit uses the barriers (then a __syncthreads):
// the release fence for mbarrier.init, and the generic -> async proxy fence (sources differ on
// whether the second is needed; both are cheap and run once).
__device__ __forceinline__ void fence_barrier_init() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
// One arrival (release), and `bytes` more transaction bytes this phase waits for: the bytes the
// copies issued next will deliver (complete_tx counts them down).
__device__ __forceinline__ void mbarrier_arrive_expect_tx(std::uint64_t* bar, std::uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(bytes)
               : "memory");
}
// Returns once the phase with this parity has completed (acquire: what the copies wrote is then
// visible). try_wait may give up after a while without the phase completing: loop.
__device__ __forceinline__ void mbarrier_wait(std::uint64_t* bar, int parity) {
  asm volatile(
      "{\n.reg .pred done;\n"
      "WAIT:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT;\n}\n" ::"r"(smem_addr(bar)),
      "r"(parity)
      : "memory");
}

// One arrival, no bytes (release: this thread's reads of the slot happen before the arrival counts).
__device__ __forceinline__ void mbarrier_arrive(std::uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_addr(bar)) : "memory");
}

// ---- the bulk tensor copy (TMA) -------------------------------------------------------------------------
// One box of the tensor `map` describes (a __grid_constant__ kernel parameter), its first element
// at coordinates (c0, c1, c2), innermost first, into shared memory at dst (1024-byte aligned for
// the 128-byte swizzle). Elements outside the tensor arrive as zeros. Completes on bar: the box's
// bytes count down its transaction count. Issued by one thread.
__device__ __forceinline__ void tma_load_3d(void* dst, const void* map, std::uint64_t* bar, int c0, int c1, int c2) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], "
      "[%5];\n" ::"r"(smem_addr(dst)),
      "l"(map), "r"(c0), "r"(c1), "r"(c2), "r"(smem_addr(bar))
      : "memory");
}

// Shared memory written by ordinary stores that the async proxy (wgmma, TMA) reads next: each
// writing thread fences, then a barrier. A barrier alone orders only the generic proxy.
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

// ---- wgmma ---------------------------------------------------------------------------------------------
// A warpgroup (4 consecutive warps, the first a multiple of 4) multiplies a [64, 16] A by a
// [16, N] B into a [64, N] fp32 accumulator spread over its 128 threads, N/2 registers each:
// register i of thread t (warp w = t/32 in the group, g = lane/4, q = lane%4) holds
//   row 16·w + g + 8·((i/2) % 2),  column 8·(i/4) + 2·q + i % 2
// (mma.sync's C fragment, one per warp and 8 columns). Asynchronous: wgmma_fence before the first
// wgmma that touches registers written by other instructions, commit the issued ones as a group,
// wgmma_wait<N> until at most N groups are still running; only then read the accumulator.
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}

// The 64-bit shared-memory matrix descriptor of a tile written by TMA with the 128-byte swizzle:
// bits 0-13 start address / 16, 16-29 leading-dimension byte offset / 16, 32-45 stride-dimension
// byte offset / 16, 62-63 the swizzle mode (1: 128 bytes). Base offset 0: every tile starts on a
// 1024-byte boundary (8 rows of 128 bytes, one period of the swizzle).
//   K-major (Q, K as [rows][64] 16-bit, a row 128 bytes): sbo = 1024 (8 rows), lbo unused (16);
//   a k-step of 16 elements is +32 bytes of start address.
//   MN-major (V as [keys][64 dims]): sbo = 1024 (8 keys), lbo = the bytes between the 64-dim
//   halves of a row; a k-step of 16 keys is +2048 bytes.
__device__ __forceinline__ std::uint64_t smem_desc(std::uint32_t addr, std::uint32_t lbo, std::uint32_t sbo) {
  return std::uint64_t((addr & 0x3FFFF) >> 4) | std::uint64_t((lbo & 0x3FFFF) >> 4) << 16 |
         std::uint64_t((sbo & 0x3FFFF) >> 4) << 32 | std::uint64_t(1) << 62;
}

#define FA_WGMMA_P32 \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define FA_WGMMA_P64 \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
  "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
  "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define FA_WGMMA_D32 \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
  "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
  "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
  "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
#define FA_WGMMA_D64 \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
  "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
  "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
  "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), \
  "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), \
  "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), \
  "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), \
  "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])

#define FA_WGMMA_P88 /* m64n176: the 64 of m64n128, then 24 more */ \
  FA_WGMMA_P64 ", " \
  "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, " \
  "%76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87"
#define FA_WGMMA_D88 \
  FA_WGMMA_D64, \
  "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), \
  "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), \
  "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87])

// D[64, N] = A·B (accumulate = 0) or D += A·B (accumulate = 1); A [64, 16] and B [16, N] both
// K-major in shared memory (descriptors): S = Q·Kᵀ, Q and K rows with the head dims contiguous.
template <int N, class T>
__device__ __forceinline__ void wgmma_ss(float (&d)[N / 2], std::uint64_t desc_a, std::uint64_t desc_b,
                                         int accumulate) {
  static_assert(N == 64 || N == 128 || N == 176, "N = 64, 128 or 176 here");
  constexpr bool kF16 = std::is_same_v<T, __half>;
#define FA_WGMMA_SS(SHAPE, TY, LIST, A, B, S)                                                      \
  "{\n.reg .pred p;\nsetp.ne.b32 p, " S ", 0;\nwgmma.mma_async.sync.aligned." SHAPE ".f32." TY "." TY \
  " {" LIST "}, " A ", " B ", p, 1, 1, 0, 0;\n}\n"
#define FA_WGMMA_AB "l"(desc_a), "l"(desc_b), "r"(accumulate)
  if constexpr (N == 64 && kF16)
    asm volatile(FA_WGMMA_SS("m64n64k16", "f16", FA_WGMMA_P32, "%32", "%33", "%34") : FA_WGMMA_D32 : FA_WGMMA_AB);
  else if constexpr (N == 64)
    asm volatile(FA_WGMMA_SS("m64n64k16", "bf16", FA_WGMMA_P32, "%32", "%33", "%34") : FA_WGMMA_D32 : FA_WGMMA_AB);
  else if constexpr (N == 128 && kF16)
    asm volatile(FA_WGMMA_SS("m64n128k16", "f16", FA_WGMMA_P64, "%64", "%65", "%66") : FA_WGMMA_D64 : FA_WGMMA_AB);
  else if constexpr (N == 128)
    asm volatile(FA_WGMMA_SS("m64n128k16", "bf16", FA_WGMMA_P64, "%64", "%65", "%66") : FA_WGMMA_D64 : FA_WGMMA_AB);
  else if constexpr (kF16)  // the 176-key tile that step 18 once had (docs/history/19_hopper_pingpong_overlap.md)
    asm volatile(FA_WGMMA_SS("m64n176k16", "f16", FA_WGMMA_P88, "%88", "%89", "%90") : FA_WGMMA_D88 : FA_WGMMA_AB);
  else
    asm volatile(FA_WGMMA_SS("m64n176k16", "bf16", FA_WGMMA_P88, "%88", "%89", "%90") : FA_WGMMA_D88 : FA_WGMMA_AB);
#undef FA_WGMMA_AB
#undef FA_WGMMA_SS
}

// D[64, N] = A·B or D += A·B with A [64, 16] in registers (4 per thread, 16-bit pairs: register j
// holds row 16·w + g + 8·(j % 2), columns 2·q + 8·(j / 2) and the next) and B [16, N] MN-major in
// shared memory (transposed: N contiguous): O += P·V, P from the softmax's registers, V rows with
// the head dims contiguous.
template <int N, class T>
__device__ __forceinline__ void wgmma_rs(float (&d)[N / 2], const std::uint32_t (&a)[4], std::uint64_t desc_b,
                                         int accumulate) {
  static_assert(N == 64 || N == 128, "N = 64 or 128 here");
  constexpr bool kF16 = std::is_same_v<T, __half>;
#define FA_WGMMA_RS(SHAPE, TY, LIST, A, B, S)                                                      \
  "{\n.reg .pred p;\nsetp.ne.b32 p, " S ", 0;\nwgmma.mma_async.sync.aligned." SHAPE ".f32." TY "." TY \
  " {" LIST "}, {" A "}, " B ", p, 1, 1, 1;\n}\n"
#define FA_WGMMA_AB "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(accumulate)
  if constexpr (N == 64 && kF16)
    asm volatile(FA_WGMMA_RS("m64n64k16", "f16", FA_WGMMA_P32, "%32, %33, %34, %35", "%36", "%37")
                 : FA_WGMMA_D32 : FA_WGMMA_AB);
  else if constexpr (N == 64)
    asm volatile(FA_WGMMA_RS("m64n64k16", "bf16", FA_WGMMA_P32, "%32, %33, %34, %35", "%36", "%37")
                 : FA_WGMMA_D32 : FA_WGMMA_AB);
  else if constexpr (kF16)
    asm volatile(FA_WGMMA_RS("m64n128k16", "f16", FA_WGMMA_P64, "%64, %65, %66, %67", "%68", "%69")
                 : FA_WGMMA_D64 : FA_WGMMA_AB);
  else
    asm volatile(FA_WGMMA_RS("m64n128k16", "bf16", FA_WGMMA_P64, "%64, %65, %66, %67", "%68", "%69")
                 : FA_WGMMA_D64 : FA_WGMMA_AB);
#undef FA_WGMMA_AB
#undef FA_WGMMA_RS
}

// ---- named barriers and register reallocation (steps 18-19) --------------------------------------------
// A block has 16 hardware barriers; __syncthreads is barrier 0 over every thread. bar.sync id, n
// waits until n threads (a multiple of 32) have reached barrier id through bar.sync or bar.arrive;
// bar.arrive counts this thread and goes on without waiting.
__device__ __forceinline__ void named_barrier_sync(int id, int n) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(n) : "memory");
}
__device__ __forceinline__ void named_barrier_arrive(int id, int n) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(n) : "memory");
}
// Every warp of a warpgroup, together: release registers down to N per thread, or wait until the
// block's pool has enough to grow to N. N a multiple of 8 in [24, 256]. Takes effect only in a kernel
// with a register cap at entry (__launch_bounds__(threads, 1)); ptxas warns when it ignores one.
template <int N>
__device__ __forceinline__ void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
}
template <int N>
__device__ __forceinline__ void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
}

}  // namespace fa::ptx
