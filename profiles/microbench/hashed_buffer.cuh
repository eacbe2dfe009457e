// hashed_buffer.cuh: the checked buffers of the read microbenchmarks (read_floor.cu, decode_stream.cu).
// Each 32-bit word holds a hash of its index, so the host can sum any range of a buffer without reading it
// back, and a kernel that skipped or repeated a word gets a different sum.
#pragma once
#include <cstdint>

namespace fa::microbench {

// The buffer's 32-bit word i.
__host__ __device__ inline std::uint32_t word(std::uint64_t i) {
  return std::uint32_t(i * 2654435761ull) ^ std::uint32_t(i >> 13);
}

// p[i] = word(first + i) for i in [0, n), grid-stride.
__global__ inline void fill(std::uint32_t* p, std::uint64_t n, std::uint64_t first = 0) {
  for (std::uint64_t i = blockIdx.x * std::uint64_t(blockDim.x) + threadIdx.x; i < n; i += std::uint64_t(gridDim.x) * blockDim.x)
    p[i] = word(first + i);
}

// The sum of a 16-byte load's four words.
__device__ __forceinline__ std::uint64_t add4(uint4 v) { return std::uint64_t(v.x) + v.y + v.z + v.w; }

}  // namespace fa::microbench
