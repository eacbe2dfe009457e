// lowp.h: fp16 and bf16 on the host, for the harness of the tensor-core steps (09+).
//
//   round_to(t, x)   x rounded to the nearest value of element type t (ties to even, as the
//                    cuda_fp16.h / cuda_bf16.h host conversions do), returned as float or double.
//                    A double is rounded once, straight to t (no double rounding through float).
//   ulp(t, x)        the spacing of t's values at |x| (the subnormal spacing below the normals).
//   rounding(t)      round_to(t, double) as a function pointer, for tests/reference.
//   DeviceTensor     device memory of `count` elements of a runtime element type (f32, f16 or
//                    bf16), filled from and read back as float: what the runner and the tests
//                    hand to an attention launcher as its void* Q, K, V, O.
// F32 is a valid type everywhere (rounding to fp32, fp32 storage), so fp32 steps take the same
// path with the same bytes as before.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "buffer.h"
#include "ops.h"

namespace fa {

inline bool is_lowp(DType t) { return t != DType::F32; }
const char* dtype_name(DType t);  // "f32", "f16", "bf16"
std::size_t dtype_bytes(DType t);

float round_to(DType t, float x);
double round_to(DType t, double x);
void round_to(DType t, std::vector<float>& v);  // in place

// Bit patterns of a 16-bit type (t is F16 or BF16): to_bits rounds to nearest even.
std::uint16_t to_bits(DType t, float x);
float from_bits(DType t, std::uint16_t bits);

double ulp(DType t, double x);

// round_to(t, ·) on doubles as a plain function pointer (ref::Rounding, for the references).
using RoundFn = double (*)(double);
RoundFn rounding(DType t);

class DeviceTensor {
 public:
  DeviceTensor(DType t, std::size_t count);
  DeviceTensor(DType t, const std::vector<float>& host);  // values rounded to t (exact if already)
  void* get() const { return bytes_.get(); }
  DType dtype() const { return type_; }
  std::size_t size() const { return count_; }
  void upload(const std::vector<float>& host);
  std::vector<float> download() const;
  // All bytes 0xFF: a NaN in f32, f16 and bf16 (see DeviceBuffer::poison_nan).
  void poison_nan() { bytes_.poison_nan(); }

 private:
  DType type_;
  std::size_t count_;
  DeviceBuffer<char> bytes_;
};

}  // namespace fa
