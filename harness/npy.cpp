// npy.cpp: a small reader and writer for NumPy's .npy format.
//
// A .npy file is:  "\x93NUMPY" | major | minor | header length (uint16 LE in 1.0, uint32 LE in
// 2.0 and 3.0) | the header, a Python dict literal padded with spaces and ending in '\n', e.g.
//   {'descr': '<f8', 'fortran_order': False, 'shape': (3, 4), }
// | the elements, raw, in the order the header says (we accept C order only).
#include "npy.h"

#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "check.h"

namespace fa {
namespace {

struct Closer {
  void operator()(std::FILE* f) const { std::fclose(f); }
};
using File = std::unique_ptr<std::FILE, Closer>;

File open_file(const std::string& path, const char* mode) {
  File f(std::fopen(path.c_str(), mode));
  if (!f) throw UsageError("cannot open '" + path + "': " + std::strerror(errno));
  return f;
}

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw UsageError("'" + path + "': " + what);
}

// IEEE half -> double: sign | 5 exponent bits (bias 15) | 10 fraction bits.
double half_to_double(uint16_t h) {
  const int exponent = (h >> 10) & 0x1f, fraction = h & 0x3ff;
  double v;
  if (exponent == 0)
    v = std::ldexp(fraction, -24);  // zero and subnormals
  else if (exponent == 31)
    v = fraction ? NAN : INFINITY;
  else
    v = std::ldexp(fraction + 1024, exponent - 25);  // (1 + fraction/2^10) * 2^(exponent-15)
  return (h & 0x8000) ? -v : v;
}

template <typename T>
double load(const unsigned char* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return static_cast<double>(v);
}
double load_f2(const unsigned char* p) {
  uint16_t h;
  std::memcpy(&h, p, sizeof h);
  return half_to_double(h);
}
double load_b1(const unsigned char* p) { return *p != 0 ? 1.0 : 0.0; }

struct Dtype {
  const char* descr;
  size_t bytes;
  double (*load)(const unsigned char*);
};
// The host is assumed little-endian (x86-64 and AArch64 Linux), like the files.
const Dtype kDtypes[] = {
    {"<f8", 8, load<double>},  {"<f4", 4, load<float>}, {"<f2", 2, load_f2},       {"<i4", 4, load<int32_t>},
    {"<i8", 8, load<int64_t>}, {"|b1", 1, load_b1},     {"|u1", 1, load<uint8_t>},
};

// Position of the value of `key` in the header dict (after "'key':" and spaces).
size_t value_of(const std::string& header, const std::string& key, const std::string& path) {
  size_t p = header.find("'" + key + "':");
  if (p == std::string::npos) fail(path, "malformed header: no '" + key + "' entry");
  p += key.size() + 3;
  while (p < header.size() && header[p] == ' ') ++p;
  return p;
}

}  // namespace

NpyArray read_npy(const std::string& path) {
  File f = open_file(path, "rb");
  return read_npy(f.get(), path);
}

NpyArray read_npy(std::FILE* f, const std::string& path) {
  // The file's size first: every length the file declares is checked against it before anything
  // of that length is allocated (a .npy file is untrusted input).
  if (std::fseek(f, 0, SEEK_END) != 0) fail(path, "cannot seek (not a regular file?)");
  const long file_size = std::ftell(f);
  if (file_size < 0 || std::fseek(f, 0, SEEK_SET) != 0) fail(path, "cannot seek (not a regular file?)");
  unsigned char pre[10];  // magic (6) | major | minor | first two bytes of the header length
  if (std::fread(pre, 1, 10, f) != 10 || std::memcmp(pre, "\x93NUMPY", 6) != 0)
    throw UsageError("'" + path + "' is not a .npy file (bad magic)");
  const int major = pre[6], minor = pre[7];
  size_t header_len = pre[8] | (pre[9] << 8), prefix = 10;
  if (major == 2 || major == 3) {  // 4-byte header length
    unsigned char hi[2];
    if (std::fread(hi, 1, 2, f) != 2) fail(path, "truncated header");
    header_len |= (size_t(hi[0]) << 16) | (size_t(hi[1]) << 24);
    prefix = 12;
  } else if (major != 1) {
    fail(path, "unsupported .npy format version " + std::to_string(major) + "." + std::to_string(minor));
  }
  if (header_len > size_t(file_size) - prefix)
    fail(path, "truncated header (it declares " + std::to_string(header_len) + " bytes, the file holds " +
                   std::to_string(size_t(file_size) - prefix) + " after the header length)");
  std::string h(header_len, '\0');
  if (header_len && std::fread(&h[0], 1, header_len, f) != header_len) fail(path, "truncated header");

  // dtype: a quoted string such as '<f4' (a list here would be a structured array).
  NpyArray a;
  size_t p = value_of(h, "descr", path);
  const size_t end = h[p] == '\'' ? h.find('\'', p + 1) : std::string::npos;
  if (end == std::string::npos) fail(path, "unsupported dtype (structured arrays are not supported)");
  a.dtype = h.substr(p + 1, end - p - 1);
  if (a.dtype[0] == '>') fail(path, "big-endian data ('" + a.dtype + "') is not supported; save it little-endian");
  const Dtype* dt = nullptr;
  for (const Dtype& d : kDtypes)
    if (a.dtype == d.descr) dt = &d;
  if (!dt) fail(path, "unsupported dtype '" + a.dtype + "' (supported: <f8 <f4 <f2 <i4 <i8 |b1 |u1)");

  p = value_of(h, "fortran_order", path);
  if (h.compare(p, 4, "True") == 0) fail(path, "fortran_order=True is not supported (save a C-ordered array)");

  // shape: a tuple of integers, "()" for a 0-d array, "(5,)" for 1-d, "(2, 3)" ...
  p = value_of(h, "shape", path);
  if (h[p] != '(') fail(path, "malformed header: shape is not a tuple");
  size_t count = 1;
  for (++p; p < h.size() && h[p] != ')';) {
    // A dimension: decimal digits only (strtoull would read "-1" as 2^64 - 1).
    if (h[p] == '-') fail(path, "malformed header: a negative dimension (" + h.substr(p, h.find_first_of(",)", p) - p) + ") in shape");
    if (h[p] < '0' || h[p] > '9') fail(path, "malformed header: bad shape");
    size_t dim = 0;
    for (; p < h.size() && h[p] >= '0' && h[p] <= '9'; ++p) {
      const size_t digit = size_t(h[p] - '0');
      if (dim > (SIZE_MAX - digit) / 10) fail(path, "shape too large");
      dim = dim * 10 + digit;
    }
    if (dim != 0 && count > SIZE_MAX / dim / dt->bytes) fail(path, "shape too large");
    a.shape.push_back(dim);
    count *= dim;
    while (p < h.size() && (h[p] == ' ' || h[p] == ',')) ++p;
  }
  if (p >= h.size()) fail(path, "malformed header: shape has no closing ')'");

  // Data: exactly count * itemsize bytes must follow the header.
  const size_t data_start = prefix + header_len;
  const size_t available = size_t(file_size) - data_start, expected = count * dt->bytes;
  if (available != expected)
    fail(path, std::string(available < expected ? "truncated data" : "unexpected trailing data") + " (expected " +
                   std::to_string(expected) + " bytes, got " + std::to_string(available) + ")");
  std::vector<unsigned char> raw(expected);
  if (expected && std::fread(raw.data(), 1, expected, f) != expected) fail(path, "read error");
  a.data.resize(count);
  for (size_t i = 0; i < count; ++i) a.data[i] = dt->load(raw.data() + i * dt->bytes);
  return a;
}

namespace {

template <typename T>
void write_impl(const std::string& path, const std::vector<size_t>& shape, const T* data, const char* descr) {
  std::string h = std::string("{'descr': '") + descr + "', 'fortran_order': False, 'shape': (";
  size_t count = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    h += (i ? ", " : "") + std::to_string(shape[i]);
    count *= shape[i];
  }
  h += shape.size() == 1 ? ",), }" : "), }";
  // Pad with spaces so that magic + version + length + header is a multiple of 64 bytes.
  h.append(63 - (10 + h.size()) % 64, ' ');
  h += '\n';
  const unsigned char pre[10] = {0x93,
                                 'N',
                                 'U',
                                 'M',
                                 'P',
                                 'Y',
                                 1,
                                 0,
                                 static_cast<unsigned char>(h.size() & 0xff),
                                 static_cast<unsigned char>(h.size() >> 8)};
  File f = open_file(path, "wb");
  bool ok = std::fwrite(pre, 1, 10, f.get()) == 10 && std::fwrite(h.data(), 1, h.size(), f.get()) == h.size() &&
            std::fwrite(data, sizeof(T), count, f.get()) == count;
  ok = (std::fclose(f.release()) == 0) && ok;
  if (!ok) fail(path, std::string("write failed: ") + std::strerror(errno));
}

}  // namespace

void write_npy(const std::string& path, const std::vector<size_t>& shape, const double* data) {
  write_impl(path, shape, data, "<f8");
}
void write_npy(const std::string& path, const std::vector<size_t>& shape, const float* data) {
  write_impl(path, shape, data, "<f4");
}

}  // namespace fa
