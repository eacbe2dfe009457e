// npy.h: read and write NumPy .npy files (the golden data of tests/data, and tool output).
//
// Reads format versions 1.0, 2.0 and 3.0, C order, little-endian, and converts the element
// types the project uses (<f8 <f4 <f2 <i4 <i8 |b1 |u1) to double. Writes version 1.0, which
// np.load reads everywhere. Every problem (missing file, not a .npy file, truncated data,
// Fortran order, big-endian, unsupported dtype) throws fa::UsageError naming the file.
#pragma once
#include <cstddef>
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

void write_npy(const std::string& path, const std::vector<size_t>& shape, const double* data);  // <f8
void write_npy(const std::string& path, const std::vector<size_t>& shape, const float* data);   // <f4

}  // namespace fa
