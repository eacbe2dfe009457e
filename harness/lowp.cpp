#include "lowp.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>

#include "check.h"
#include "parallel.h"

namespace fa {

const char* dtype_name(DType t) { return t == DType::F32 ? "f32" : t == DType::F16 ? "f16" : "bf16"; }
std::size_t dtype_bytes(DType t) { return t == DType::F32 ? 4 : 2; }

namespace {
inline std::uint32_t bits_of(float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}
inline float float_of(std::uint32_t u) {
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}

// The host's conversions, written out so that the loops over a sweep's largest caches (2^31 elements, each
// rounded, then converted for the upload) inline them, one type per loop: the same bits as the cuda_fp16.h /
// cuda_bf16.h host functions (__float2half_rn, __half2float, __float2bfloat16_rn: tests/test_harness.cpp
// compares them at every rounding position of every exponent, or on all 2^32 floats with FA_LOWP_EXHAUSTIVE=1),
// in about half their time.
// q = m >> shift rounded to nearest, ties to even.
inline std::uint32_t shift_rne(std::uint32_t m, std::uint32_t shift) {
  const std::uint32_t q = m >> shift, rest = m & ((1u << shift) - 1), half = 1u << (shift - 1);
  return q + ((rest > half) | ((rest == half) & (q & 1u)));  // no branch: half the values round up
}
inline std::uint16_t f16_bits(float x) {
  const std::uint32_t u = bits_of(x) & 0x7FFFFFFFu, sign = (bits_of(x) >> 16) & 0x8000u;
  if (u > 0x7F800000u) return 0x7FFFu;                       // NaN: one quiet NaN, no sign (as CUDA's)
  if (u >= 0x477FF000u) return std::uint16_t(sign | 0x7C00u);  // at or past 65520, halfway to 2^16: ±inf
  if (u >= 0x38800000u)                                        // 2^-14 and up: fp16 normals, exponent rebased
    return std::uint16_t(sign | shift_rne(u - 0x38000000u, 13));  // (a carry into the exponent is right)
  if (u <= 0x33000000u) return std::uint16_t(sign);            // up to 2^-25, half the least subnormal: ±0
  // Subnormals: |x| = (1.m) · 2^(e - 127) in units of 2^-24 is the 24-bit significand >> (126 - e).
  return std::uint16_t(sign | shift_rne((u & 0x7FFFFFu) | 0x800000u, 126 - (u >> 23)));
}
inline float f16_value(std::uint16_t h) {
  const std::uint32_t sign = std::uint32_t(h & 0x8000u) << 16, e = (h >> 10) & 0x1Fu, m = h & 0x3FFu;
  if (e == 0x1Fu) return float_of(m ? 0x7FFFFFFFu : sign | 0x7F800000u);  // NaN (as CUDA's: no sign) or ±inf
  if (e == 0) return float_of(sign | bits_of(float(m) * 0x1.0p-24f));      // subnormal or zero: exact
  return float_of(sign | ((e + 112u) << 23) | (m << 13));
}
inline float bf16_value(std::uint16_t h) { return float_of(std::uint32_t(h) << 16); }  // exact
inline std::uint16_t bf16_bits(float x) {
  const std::uint32_t u = bits_of(x);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return 0x7FFFu;  // NaN
  return std::uint16_t(shift_rne(u, 16));  // the carry of a round up may reach the exponent: ±inf past the top
}
}  // namespace

std::uint16_t to_bits(DType t, float x) {
  if (t == DType::F16) return f16_bits(x);
  if (t == DType::BF16) return bf16_bits(x);
  throw Error("to_bits: f32 has no 16-bit pattern");
}

float from_bits(DType t, std::uint16_t bits) {
  if (t == DType::F16) return f16_value(bits);
  if (t == DType::BF16) return bf16_value(bits);
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
      if (t == DType::F16)
        for (std::size_t i = begin; i < end; ++i) v[i] = f16_value(f16_bits(v[i]));
      else
        for (std::size_t i = begin; i < end; ++i) v[i] = bf16_value(bf16_bits(v[i]));
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
    if (type_ == DType::F16)
      for (std::size_t i = begin; i < end; ++i) bits[i] = f16_bits(host[i]);
    else
      for (std::size_t i = begin; i < end; ++i) bits[i] = bf16_bits(host[i]);
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
    if (type_ == DType::F16)
      for (std::size_t i = begin; i < end; ++i) host[i] = f16_value(bits[i]);
    else
      for (std::size_t i = begin; i < end; ++i) host[i] = bf16_value(bits[i]);
  });
  return host;
}

}  // namespace fa
