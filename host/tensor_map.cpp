// tensor_map.cpp: cuTensorMapEncodeTiled through the runtime's driver entry point (tensor_map.h).
#include "tensor_map.h"

#include <cudaTypedefs.h>  // PFN_cuTensorMapEncodeTiled_v12000
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "check.h"

namespace fa {
namespace {

// The driver's encoder, looked up once. Without a driver the runtime says so and the pointer
// stays null: that becomes an Error when a tensor map is first needed, not a failure to start.
PFN_cuTensorMapEncodeTiled_v12000 encoder() {
  static const PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
    const cudaError_t err =
        cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &found);
    if (err != cudaSuccess || found != cudaDriverEntryPointSuccess) {
      cudaGetLastError();  // clear it: the caller reports the missing encoder
      p = nullptr;
    }
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(p);
  }();
  return fn;
}

}  // namespace

CUtensorMap tensor_map_16bit_3d(const void* base, DType dtype, long long outer, long long rows, long long cols,
                                int box_rows, int box_cols, const char* step, const char* what) {
  const std::string who = std::string(step) + ": the tensor map of " + what;
  if (dtype != DType::F16 && dtype != DType::BF16) throw UsageError(who + " needs fp16 or bf16 elements");
  // What the encoder requires (cuda.h, cuTensorMapEncodeTiled), said in this problem's terms.
  if (reinterpret_cast<std::uintptr_t>(base) % 16 != 0)
    throw UsageError(who + ": its address is not a multiple of 16 bytes");
  if (cols * 2 % 16 != 0)
    throw UsageError(who + ": a row of " + std::to_string(cols) + " elements is not a multiple of 16 bytes");
  if (outer < 1 || rows < 1 || cols < 1 || outer > (1LL << 32) || rows > (1LL << 32) || cols > (1LL << 32))
    throw UsageError(who + ": sizes [" + std::to_string(outer) + ", " + std::to_string(rows) + ", " +
                     std::to_string(cols) + "] out of the range 1 .. 2^32");
  if (box_rows < 1 || box_rows > 256 || box_cols < 8 || box_cols * 2 > 128)
    throw UsageError(who + ": a box of [" + std::to_string(box_rows) + ", " + std::to_string(box_cols) +
                     "] does not fit the 128-byte swizzle");
  const PFN_cuTensorMapEncodeTiled_v12000 encode = encoder();
  if (!encode) throw Error(who + ": cuTensorMapEncodeTiled is not available (no CUDA driver of version 12.0 or later)");

  CUtensorMap map;  // 64-byte aligned by its declaration in cuda.h
  const cuuint64_t dims[3] = {cuuint64_t(cols), cuuint64_t(rows), cuuint64_t(outer)};  // innermost first
  const cuuint64_t strides[2] = {cuuint64_t(cols) * 2, cuuint64_t(rows) * cuuint64_t(cols) * 2};  // bytes, dims 1, 2
  const cuuint32_t box[3] = {cuuint32_t(box_cols), cuuint32_t(box_rows), 1};
  const cuuint32_t element_strides[3] = {1, 1, 1};
  const CUresult r = encode(&map, dtype == DType::F16 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
                            3, const_cast<void*>(base), dims, strides, box, element_strides,
                            CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                            CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    throw UsageError(who + ": cuTensorMapEncodeTiled refused it (CUresult " + std::to_string(int(r)) + ") for sizes [" +
                     std::to_string(outer) + ", " + std::to_string(rows) + ", " + std::to_string(cols) +
                     "], box [" + std::to_string(box_rows) + ", " + std::to_string(box_cols) + "]");
  return map;
}

}  // namespace fa
