#include "lowp.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <memory>

#include "check.h"
#include "parallel.h"

namespace fa {

const char* dtype_name(DType t) { return t == DType::F32 ? "f32" : t == DType::F16 ? "f16" : "bf16"; }
std::size_t dtype_bytes(DType t) { return t == DType::F32 ? 4 : 2; }

std::uint16_t to_bits(DType t, float x) {
  if (t == DType::F16) return __half_raw(__float2half_rn(x)).x;
  if (t == DType::BF16) return __nv_bfloat16_raw(__float2bfloat16_rn(x)).x;
  throw Error("to_bits: f32 has no 16-bit pattern");
}

float from_bits(DType t, std::uint16_t bits) {
  if (t == DType::F16) {
    __half_raw r;
    r.x = bits;
    return __half2float(__half(r));
  }
  if (t == DType::BF16) {
    __nv_bfloat16_raw r;
    r.x = bits;
    return __bfloat162float(__nv_bfloat16(r));
  }
  throw Error("from_bits: f32 has no 16-bit pattern");
}

float round_to(DType t, float x) { return t == DType::F32 ? x : from_bits(t, to_bits(t, x)); }

double round_to(DType t, double x) {
  switch (t) {
    case DType::F32:
      return double(float(x));
    case DType::F16:
      return double(__half2float(__double2half(x)));
    case DType::BF16:
      return double(__bfloat162float(__double2bfloat16(x)));
  }
  return x;
}

RoundFn rounding(DType t) {
  switch (t) {
    case DType::F32:
      return [](double x) { return round_to(DType::F32, x); };
    case DType::F16:
      return [](double x) { return round_to(DType::F16, x); };
    case DType::BF16:
      return [](double x) { return round_to(DType::BF16, x); };
  }
  return nullptr;
}

void round_to(DType t, std::vector<float>& v) {
  if (is_lowp(t))
    parallel_ranges(v.size(), [&](std::size_t begin, std::size_t end) {
      for (std::size_t i = begin; i < end; ++i) v[i] = round_to(t, v[i]);
    });
}

double ulp(DType t, double x) {
  // mantissa bits (without the implicit one) and the smallest normal exponent of each type
  const int mant = t == DType::F32 ? 23 : t == DType::F16 ? 10 : 7;
  const int emin = t == DType::F16 ? -14 : -126;
  int e = emin + 1;                          // 0: the subnormal spacing
  if (x != 0) std::frexp(std::fabs(x), &e);  // |x| = f·2^e, f in [0.5, 1): |x| in [2^(e-1), 2^e)
  return std::ldexp(1.0, std::max(e - 1, emin) - mant);
}

DeviceTensor::DeviceTensor(DType t, std::size_t count) : type_(t), count_(count), bytes_(count * dtype_bytes(t)) {}
DeviceTensor::DeviceTensor(DType t, const std::vector<float>& host) : DeviceTensor(t, host.size()) { upload(host); }

void DeviceTensor::upload(const std::vector<float>& host) {
  if (host.size() != count_) throw Error("DeviceTensor::upload: size mismatch");
  if (!count_) return;
  if (type_ == DType::F32) {
    FA_CUDA_CHECK(cudaMemcpy(get(), host.data(), count_ * 4, cudaMemcpyHostToDevice));
    return;
  }
  // Not zeroed first (new[], not a vector): the cores write it, each its own part, for a decode cache of GBs.
  const std::unique_ptr<std::uint16_t[]> bits(new std::uint16_t[count_]);
  parallel_ranges(count_, [&](std::size_t begin, std::size_t end) {
    for (std::size_t i = begin; i < end; ++i) bits[i] = to_bits(type_, host[i]);
  });
  FA_CUDA_CHECK(cudaMemcpy(get(), bits.get(), count_ * 2, cudaMemcpyHostToDevice));
}

std::vector<float> DeviceTensor::download() const {
  std::vector<float> host(count_);
  if (!count_) return host;
  if (type_ == DType::F32) {
    FA_CUDA_CHECK(cudaMemcpy(host.data(), get(), count_ * 4, cudaMemcpyDeviceToHost));
    return host;
  }
  std::vector<std::uint16_t> bits(count_);
  FA_CUDA_CHECK(cudaMemcpy(bits.data(), get(), count_ * 2, cudaMemcpyDeviceToHost));
  parallel_ranges(count_, [&](std::size_t begin, std::size_t end) {
    for (std::size_t i = begin; i < end; ++i) host[i] = from_bits(type_, bits[i]);
  });
  return host;
}

}  // namespace fa
