// npy.h: read and write NumPy .npy files (the golden data of tests/data, and tool output).
//
// Reads format versions 1.0, 2.0 and 3.0, C order, little-endian, and converts the element
// types the project uses (<f8 <f4 <f2 <i4 <i8 |b1 |u1) to double. Writes version 1.0, which
// np.load reads everywhere. Every problem (missing file, not a .npy file, truncated data,
// Fortran order, big-endian, unsupported dtype) throws fa::UsageError naming the file.
//
// A .npy file is untrusted input: every length it declares (the header's, the data's from the
// shape) is checked against the file's size before anything of that length is allocated, and a
// shape is decimal digits only (a negative dimension is malformed). tests/fuzz_npy.cpp fuzzes the
// reader; its seed corpus, tests/data/npy_corpus/, is replayed by test_npy.
#pragma once
#include <cstddef>
#include <cstdio>
#include <string>
#include <vector>

namespace fa {

struct NpyArray {
  std::vector<size_t> shape;  // {} for a 0-d array (one element)
  std::vector<double> data;   // C order, converted to double
  std::string dtype;          // as stored in the file, e.g. "<f8", "<f4"
  size_t size() const { return data.size(); }
};

NpyArray read_npy(const std::string& path);
// The same from an open, seekable file (read from its start); `name` names it in errors.
NpyArray read_npy(std::FILE* f, const std::string& name);

void write_npy(const std::string& path, const std::vector<size_t>& shape, const double* data);  // <f8
void write_npy(const std::string& path, const std::vector<size_t>& shape, const float* data);   // <f4

}  // namespace fa
