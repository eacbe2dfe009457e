// test_npy.cpp: the .npy reader and writer (harness/npy.h): round trips, the element types the
// reader converts, format versions, and a clear fa::UsageError naming the file for every bad
// input. CPU only; the files are written into a fresh temporary directory.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "check.h"
#include "npy.h"

namespace {

namespace fs = std::filesystem;

class Npy : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("fa_test_npy_" + std::to_string(std::random_device{}()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  // Writes raw bytes to a file in the temp dir and returns its path.
  std::string write_raw(const std::string& name, const std::string& bytes) const {
    std::ofstream(path(name), std::ios::binary) << bytes;
    return path(name);
  }

  // A .npy file by hand: magic, version, header length (2 bytes in 1.0, 4 in 2.0/3.0), the
  // header dict padded with spaces to a multiple of 64 bytes, then the payload.
  std::string write_npy_raw(const std::string& name, const std::string& dict, const std::string& payload,
                            int major = 1) const {
    const size_t len_bytes = major == 1 ? 2 : 4;
    std::string header = dict;
    while ((8 + len_bytes + header.size() + 1) % 64 != 0) header += ' ';
    header += '\n';
    std::string bytes = "\x93NUMPY";
    bytes += char(major);
    bytes += char(0);
    for (size_t i = 0; i < len_bytes; ++i) bytes += char((header.size() >> (8 * i)) & 0xff);
    return write_raw(name, bytes + header + payload);
  }

  fs::path dir_;
};

template <typename T>
std::string bytes_of(std::initializer_list<T> values) {
  std::string s;
  for (T v : values) s.append(reinterpret_cast<const char*>(&v), sizeof v);
  return s;
}

// Reading `file` must throw fa::UsageError whose message names the file and contains `what`.
void expect_usage_error(const std::string& file, const std::string& what) {
  try {
    fa::read_npy(file);
    ADD_FAILURE() << "reading " << file << " did not throw (expected: " << what << ")";
  } catch (const fa::UsageError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(file), std::string::npos) << "message does not name the file: " << msg;
    EXPECT_NE(msg.find(what), std::string::npos) << "message does not say '" << what << "': " << msg;
  }
}

// ---- round trips ------------------------------------------------------------------------------

TEST_F(Npy, RoundTripF8ThreeD) {
  const std::vector<size_t> shape = {2, 3, 4};
  std::vector<double> x(24);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::ldexp(1.0, int(i)) / 3.0 - 7.0;  // not float-exact
  x[5] = -INFINITY;
  x[6] = NAN;
  fa::write_npy(path("a.npy"), shape, x.data());
  const fa::NpyArray a = fa::read_npy(path("a.npy"));
  EXPECT_EQ(a.dtype, "<f8");
  EXPECT_EQ(a.shape, shape);
  ASSERT_EQ(a.size(), x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    if (i == 6)
      EXPECT_TRUE(std::isnan(a.data[i]));
    else
      EXPECT_EQ(a.data[i], x[i]) << i;
  }
}

TEST_F(Npy, RoundTripF4OneD) {
  const std::vector<float> x = {1.5f, -0.1f, 3e38f, 1e-40f /* subnormal */, 0.0f};
  fa::write_npy(path("b.npy"), {x.size()}, x.data());
  const fa::NpyArray a = fa::read_npy(path("b.npy"));
  EXPECT_EQ(a.dtype, "<f4");
  EXPECT_EQ(a.shape, std::vector<size_t>{x.size()});
  ASSERT_EQ(a.size(), x.size());
  for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(a.data[i], double(x[i])) << i;
}

TEST_F(Npy, RoundTripZeroDAndEmpty) {
  const double scalar = 42.25;
  fa::write_npy(path("scalar.npy"), {}, &scalar);
  const fa::NpyArray s = fa::read_npy(path("scalar.npy"));
  EXPECT_TRUE(s.shape.empty());
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s.data[0], scalar);

  const float none = 0.0f;
  fa::write_npy(path("empty.npy"), {0, 3}, &none);
  const fa::NpyArray e = fa::read_npy(path("empty.npy"));
  EXPECT_EQ(e.shape, (std::vector<size_t>{0, 3}));
  EXPECT_EQ(e.size(), 0u);
}

TEST_F(Npy, HeaderIsPaddedTo64Bytes) {  // as NumPy pads it, so the data is aligned
  const double x[6] = {};
  fa::write_npy(path("p.npy"), {2, 3}, x);
  const std::string dict = "{'descr': '<f8', 'fortran_order': False, 'shape': (2, 3), }";
  std::ifstream in(path("p.npy"), std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_EQ(bytes.size(), 128u + sizeof x);  // 10 + 60 + padding + '\n' = 128
  EXPECT_EQ(bytes.substr(10, dict.size()), dict);
  EXPECT_EQ(bytes[127], '\n');
}

// ---- element types and versions written by hand, as NumPy would -------------------------------

TEST_F(Npy, ConvertsEveryElementType) {
  struct Case {
    const char* descr;
    std::string payload;
    std::vector<double> expected;
  };
  const Case cases[] = {
      {"<f2",
       bytes_of<uint16_t>({0x3c00, 0xc000, 0x0001, 0x7c00, 0x3555}),
       {1.0, -2.0, std::ldexp(1.0, -24), INFINITY, 0.333251953125}},
      {"<i4", bytes_of<int32_t>({-7, 0, 2147483647}), {-7.0, 0.0, 2147483647.0}},
      {"<i8", bytes_of<int64_t>({-3, 1LL << 40, 5}), {-3.0, std::ldexp(1.0, 40), 5.0}},
      {"|b1", bytes_of<uint8_t>({1, 0, 1}), {1.0, 0.0, 1.0}},
      {"|u1", bytes_of<uint8_t>({255, 0, 7}), {255.0, 0.0, 7.0}},
  };
  for (const Case& c : cases) {
    const std::string dict = std::string("{'descr': '") + c.descr + "', 'fortran_order': False, 'shape': (" +
                             std::to_string(c.expected.size()) + ",), }";
    const fa::NpyArray a = fa::read_npy(write_npy_raw("t.npy", dict, c.payload));
    EXPECT_EQ(a.dtype, c.descr);
    EXPECT_EQ(a.data, c.expected) << c.descr;
  }
}

TEST_F(Npy, ReadsVersions2And3) {
  for (int major : {2, 3}) {
    const std::string file = write_npy_raw("v.npy", "{'descr': '<f8', 'fortran_order': False, 'shape': (1, 2), }",
                                           bytes_of<double>({0.5, -1.5}), major);
    const fa::NpyArray a = fa::read_npy(file);
    EXPECT_EQ(a.shape, (std::vector<size_t>{1, 2})) << "version " << major;
    EXPECT_EQ(a.data, (std::vector<double>{0.5, -1.5})) << "version " << major;
  }
}

// ---- errors: a fa::UsageError that names the file and the problem -------------------------------

TEST_F(Npy, MissingFile) { expect_usage_error(path("does_not_exist.npy"), "cannot open"); }

TEST_F(Npy, BadMagic) {
  expect_usage_error(write_raw("text.npy", "this is not a numpy file at all"), "is not a .npy file (bad magic)");
  expect_usage_error(write_raw("short.npy", "\x93NUM"), "bad magic");
}

TEST_F(Npy, TruncatedData) {
  const std::string file =
      write_npy_raw("trunc.npy", "{'descr': '<f8', 'fortran_order': False, 'shape': (10,), }", std::string(40, '\0'));
  expect_usage_error(file, "truncated data (expected 80 bytes, got 40)");
}

TEST_F(Npy, TruncatedHeader) {
  // Says the header is 0x76 bytes long, then ends after 8 of them.
  expect_usage_error(write_raw("h.npy", std::string("\x93NUMPY\x01\x00\x76\x00", 10) + "{'descr'"), "truncated header");
}

TEST_F(Npy, TrailingData) {
  const std::string file =
      write_npy_raw("trail.npy", "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", std::string(12, '\0'));
  expect_usage_error(file, "unexpected trailing data (expected 8 bytes, got 12)");
}

TEST_F(Npy, FortranOrder) {
  const std::string file =
      write_npy_raw("f.npy", "{'descr': '<f8', 'fortran_order': True, 'shape': (2, 2), }", std::string(32, '\0'));
  expect_usage_error(file, "fortran_order");
}

TEST_F(Npy, UnsupportedDtype) {
  const std::string file =
      write_npy_raw("c.npy", "{'descr': '<c16', 'fortran_order': False, 'shape': (1,), }", std::string(16, '\0'));
  expect_usage_error(file, "unsupported dtype '<c16'");
}

TEST_F(Npy, BigEndian) {
  const std::string file =
      write_npy_raw("be.npy", "{'descr': '>f8', 'fortran_order': False, 'shape': (1,), }", std::string(8, '\0'));
  expect_usage_error(file, "big-endian");
}

TEST_F(Npy, UnsupportedVersion) {
  expect_usage_error(
      write_npy_raw("v9.npy", "{'descr': '<f8', 'fortran_order': False, 'shape': (1,), }", std::string(8, '\0'), 9),
      "unsupported .npy format version 9.0");
}

TEST_F(Npy, MalformedHeader) {
  expect_usage_error(write_npy_raw("noshape.npy", "{'descr': '<f8', 'fortran_order': False, }", ""), "no 'shape'");
  expect_usage_error(write_npy_raw("badshape.npy", "{'descr': '<f8', 'fortran_order': False, 'shape': (x,), }", ""),
                     "bad shape");
}

// A .npy file is untrusted input. A header length beyond the file is refused before the header
// is allocated (a 12-byte file claiming a 4 GiB header allocated 4.9 GB before), and a negative
// dimension is malformed, not read as 2^64 - 1 ("shape too large").
TEST_F(Npy, HeaderLongerThanTheFileIsRefusedBeforeAllocating) {
  expect_usage_error(write_raw("huge_header.npy", std::string("\x93NUMPY\x02\x00\xff\xff\xff\xff", 12)),
                     "truncated header (it declares 4294967295 bytes, the file holds 0 after the header length)");
  expect_usage_error(write_raw("long_header.npy", std::string("\x93NUMPY\x01\x00\x00\x01", 10) + "{'descr'"),
                     "truncated header (it declares 256 bytes, the file holds 8");
}

TEST_F(Npy, NegativeDimensionIsMalformed) {
  expect_usage_error(write_npy_raw("neg.npy", "{'descr': '<f8', 'fortran_order': False, 'shape': (-1,), }", ""),
                     "malformed header: a negative dimension (-1) in shape");
  expect_usage_error(write_npy_raw("neg2.npy", "{'descr': '<f4', 'fortran_order': False, 'shape': (2, -3), }", ""),
                     "malformed header: a negative dimension (-3) in shape");
  expect_usage_error(
      write_npy_raw("open.npy", "{'descr': '<f8', 'fortran_order': False, 'shape': (2,", "", 1), "malformed header");
}

// The fuzz target's seed corpus (tests/fuzz_npy.cpp), replayed through the normal reader so CI runs
// it without clang: ok_* files are read, bad_* files are refused with a UsageError naming the file;
// nothing else (no other exception, no crash, no huge allocation).
TEST(NpyCorpus, SeedCorpusReadsOrIsRefusedCleanly) {
  const fs::path corpus = fs::path(FA_DATA_DIR) / "npy_corpus";
  int ok = 0, bad = 0;
  for (const auto& entry : fs::directory_iterator(corpus)) {
    const std::string name = entry.path().filename().string(), file = entry.path().string();
    if (name.rfind("ok_", 0) == 0) {
      EXPECT_NO_THROW(fa::read_npy(file)) << name;
      ++ok;
    } else if (name.rfind("bad_", 0) == 0) {
      expect_usage_error(file, "");
      ++bad;
    }
  }
  EXPECT_GE(ok, 10);
  EXPECT_GE(bad, 20);
}

TEST_F(Npy, UnwritablePath) {
  const double x = 1.0;
  try {
    fa::write_npy(path("no_such_dir/out.npy"), {}, &x);
    ADD_FAILURE() << "writing into a missing directory did not throw";
  } catch (const fa::UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("no_such_dir/out.npy"), std::string::npos) << e.what();
  }
}

}  // namespace
