// mma_sync.cuh: the warp-level tensor-core instructions that step 09 teaches, one function per
// instruction, for the steps after it to include (10, 11, ...). Step 09 writes them out inline
// in its kernel.cu, where they are explained; docs/09_tensor_core_forward.md draws the fragments.
// Later headers of the same kind sit beside this one (cp_async.cuh: step 10; the mbarrier, TMA
// and wgmma instructions of steps 17-19).
//
// Namespace fa::ptx: one-to-one wrappers, `__device__ __forceinline__`, no policy. A step takes
// them in with `using namespace fa::ptx;` inside its own namespace.
//
//   ldmatrix_x4(r, smem)          ldmatrix.sync.aligned.m8n8.x4.shared.b16
//   ldmatrix_x4_trans(r, smem)    the same with .trans
//   mma_16816<T>(c, a, b0, b1)    mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16}: c += a·b
//   pack<T>(x, y)                 two fp32 -> one register of two fp16/bf16 (cvt.rn)
//   unpack<T>(r)                  its inverse: one register of two fp16/bf16 -> float2
//   quad_max(x), quad_sum(x)      max / sum over the 4 lanes holding one row of a C fragment
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

namespace fa::ptx {

// ldmatrix.x4: the warp reads four 8×8 matrices of 16-bit elements from shared memory. Lanes
// 8i..8i+7 give the addresses of the 8 rows (16 bytes each) of matrix i; afterwards register i of
// lane l holds row l/4, elements 2·(l%4) and 2·(l%4)+1 of matrix i, which is exactly how
// mma.m16n8k16 wants its A and B fragments laid out. `.trans` delivers each matrix transposed.
__device__ __forceinline__ void ldmatrix_x4(std::uint32_t (&r)[4], const void* smem) {
  const auto a = static_cast<std::uint32_t>(__cvta_generic_to_shared(smem));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}
__device__ __forceinline__ void ldmatrix_x4_trans(std::uint32_t (&r)[4], const void* smem) {
  const auto a = static_cast<std::uint32_t>(__cvta_generic_to_shared(smem));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}

// c [16×8, fp32] += a [16×16] · b [16×8], one warp. T: __half or __nv_bfloat16. Fragments
// (g = lane/4, t = lane%4):
//   a[0]: A[g][2t, 2t+1]   a[1]: A[g+8][2t, 2t+1]   a[2]: A[g][2t+8, +9]   a[3]: A[g+8][2t+8, +9]
//   b0:   B[2t, 2t+1][g]   b1:   B[2t+8, 2t+9][g]
//   c[0], c[1]: C[g][2t, 2t+1]                       c[2], c[3]: C[g+8][2t, 2t+1]
template <class T>
__device__ __forceinline__ void mma_16816(float (&c)[4], const std::uint32_t (&a)[4], std::uint32_t b0,
                                          std::uint32_t b1) {
  if constexpr (std::is_same_v<T, __half>)
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  else
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Two fp32 values -> one register of two fp16/bf16 (x in the low half: the lower column).
template <class T>
__device__ __forceinline__ std::uint32_t pack(float x, float y) {
  if constexpr (std::is_same_v<T, __half>) {
    const __half2 h = __floats2half2_rn(x, y);
    return *reinterpret_cast<const std::uint32_t*>(&h);
  } else {
    const __nv_bfloat162 h = __floats2bfloat162_rn(x, y);
    return *reinterpret_cast<const std::uint32_t*>(&h);
  }
}

// One register of two fp16/bf16 -> two fp32 (low half: x), the inverse of pack.
template <class T>
__device__ __forceinline__ float2 unpack(std::uint32_t r) {
  if constexpr (std::is_same_v<T, __half>)
    return __half22float2(*reinterpret_cast<const __half2*>(&r));
  else
    return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&r));
}

// Max / sum over the 4 lanes that hold a row of a C fragment (lanes 4g .. 4g+3): two shuffles.
__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

}  // namespace fa::ptx
