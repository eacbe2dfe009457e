// tensor_map.h: the tensor maps that the bulk tensor copies (TMA) of steps 17 and later read. A
// tensor map is a 128-byte descriptor, built on the host, of a tensor in global memory (address,
// sizes, strides, element type) and of the box one copy moves (its size and the swizzle it
// writes into shared memory). The kernel gets it by value as a `const __grid_constant__
// CUtensorMap` parameter; one thread then copies a whole box with one instruction.
//
// It is encoded by the driver's cuTensorMapEncodeTiled, reached through the runtime's
// cudaGetDriverEntryPointByVersion rather than by linking libcuda: on a machine without a GPU
// driver (CI) only a link-time stub of libcuda exists, and an executable linked against it would
// not even start, taking its CPU tests down with it.
#pragma once
#include <cuda.h>  // CUtensorMap and its enums (types only: nothing from libcuda is linked)

#include "ops.h"

namespace fa {

// The tensor map of a contiguous 16-bit tensor [outer, rows, cols] (cols contiguous: attention's
// Q, K or V as [batch·heads, seq, head_dim]), copied in boxes of [box_rows, box_cols] of one outer
// index with the 128-byte swizzle (so box_cols·2 <= 128). A box that reaches past `rows` or `cols`
// arrives with zeros there, and never reads the next outer index's rows. `what` names the tensor
// in messages ("Q"). Throws UsageError with a clear message when the tensor cannot be described
// (an address or row stride that is not a multiple of 16 bytes, a size out of range, or the
// driver's encoder refuses it) and Error when the encoder is unavailable (no driver).
CUtensorMap tensor_map_16bit_3d(const void* base, DType dtype, long long outer, long long rows, long long cols,
                                int box_rows, int box_cols, const char* step, const char* what);

}  // namespace fa
