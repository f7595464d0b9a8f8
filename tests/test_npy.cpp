// .npy reading and writing, and NumPy's text form of arrays.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>

#include "ir/error.h"
#include "runtime/npy.h"

using fuse::ir::DType;
using fuse::ir::Error;
using fuse::ir::HostArray;
using fuse::runtime::array_repr;
using fuse::runtime::parse_npy;
using fuse::runtime::read_npy;
using fuse::runtime::serialize_npy;
using fuse::runtime::write_npy;

namespace {

/// A .npy file of format `major`.0 with this header dict and raw data.
std::string npy_bytes(const std::string& header, const std::string& data, int major = 1) {
  std::string out = "\x93NUMPY";
  out += static_cast<char>(major);
  out += '\0';
  std::string h = header + "\n";
  for (int i = 0; i < (major == 1 ? 2 : 4); ++i) out += static_cast<char>((h.size() >> (8 * i)) & 0xff);
  return out + h + data;
}

template <class T>
std::string raw(const std::vector<T>& values) {
  return std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(T));
}

bool same(const HostArray& a, const HostArray& b) {
  return a.dtype == b.dtype && a.shape == b.shape && a.bytes == b.bytes;
}

/// The message of the Error that parsing `bytes` throws.
std::string parse_error(const std::string& bytes) {
  try {
    parse_npy(bytes, "t.npy");
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

std::filesystem::path scratch_dir() {
  std::filesystem::path dir = std::filesystem::path(FUSE_BINARY_DIR) / "tests" / "npy_scratch";
  std::filesystem::create_directories(dir);
  return dir;
}

}  // namespace

TEST_CASE("every dtype round-trips through a file", "[npy]") {
  std::vector<HostArray> arrays = {
      HostArray::from<bool>({2, 2}, {true, false, false, true}),
      HostArray::from<int32_t>({3}, {-7, 0, std::numeric_limits<int32_t>::max()}),
      HostArray::from<int64_t>({2, 1, 2}, {1, -2, std::numeric_limits<int64_t>::min(), 4}),
      HostArray::from<float>({2, 3}, {0.5f, -1.25f, 3e38f, -0.0f, 1e-30f, 7}),
      HostArray::from<double>({1, 2}, {M_PI, -1e300}),
  };
  for (const HostArray& a : arrays) {
    std::string path = (scratch_dir() / ("a_" + std::string(fuse::ir::dtype_name(a.dtype)) + ".npy")).string();
    write_npy(path, a);
    CHECK(same(read_npy(path), a));
  }
}

TEST_CASE("0-d and empty arrays round-trip", "[npy]") {
  for (const HostArray& a : {HostArray::scalar<float>(2.5f), HostArray::scalar<int64_t>(-3),
                             HostArray(DType::F64, {0}), HostArray(DType::I32, {2, 0, 3})})
    CHECK(same(parse_npy(serialize_npy(a), "mem"), a));
  CHECK(serialize_npy(HostArray::scalar<float>(1)).find("'shape': ()") != std::string::npos);
  CHECK(serialize_npy(HostArray(DType::F32, {4})).find("'shape': (4,)") != std::string::npos);
}

TEST_CASE("written files are version 1.0 with the data 64-byte aligned", "[npy]") {
  std::string bytes = serialize_npy(HostArray::from<float>({2, 3}, {1, 2, 3, 4, 5, 6}));
  REQUIRE(bytes.substr(0, 8) == std::string("\x93NUMPY\x01\x00", 8));
  size_t header_len = static_cast<unsigned char>(bytes[8]) | static_cast<unsigned char>(bytes[9]) << 8;
  CHECK((10 + header_len) % 64 == 0);
  CHECK(bytes[10 + header_len - 1] == '\n');
  CHECK(bytes.substr(10, 60).starts_with("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }"));
  CHECK(bytes.size() == 10 + header_len + 6 * 4);
}

TEST_CASE("Fortran-ordered data is transposed into row-major order", "[npy]") {
  // The 2x3 matrix [[1, 2, 3], [4, 5, 6]] stored column by column.
  std::string f = npy_bytes("{'descr': '<i4', 'fortran_order': True, 'shape': (2, 3), }",
                            raw<int32_t>({1, 4, 2, 5, 3, 6}));
  CHECK(same(parse_npy(f, "f.npy"), HostArray::from<int32_t>({2, 3}, {1, 2, 3, 4, 5, 6})));
  // 2x2x2: element (i, j, k) at i + 2j + 4k in the file.
  std::vector<double> column_major(8), row_major(8);
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 2; ++j)
      for (int k = 0; k < 2; ++k) {
        double v = 100 * i + 10 * j + k;
        column_major[i + 2 * j + 4 * k] = v;
        row_major[4 * i + 2 * j + k] = v;
      }
  std::string g = npy_bytes("{'descr': '<f8', 'fortran_order': True, 'shape': (2, 2, 2), }",
                            raw(column_major));
  CHECK(same(parse_npy(g, "g.npy"), HostArray::from<double>({2, 2, 2}, row_major)));
}

TEST_CASE("versions 2.0 and 3.0, and header spelling variants, are read", "[npy]") {
  HostArray expected = HostArray::from<float>({2}, {1.5f, -2});
  for (int major : {2, 3})
    CHECK(same(parse_npy(npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }",
                                   raw<float>({1.5f, -2}), major), "v.npy"),
               expected));
  CHECK(same(parse_npy(npy_bytes("{\"shape\":(2L,),\"fortran_order\":False,\"descr\":\"<f4\"}",
                                 raw<float>({1.5f, -2})), "v.npy"),
             expected));
}

TEST_CASE("any nonzero bool byte reads as true", "[npy]") {
  HostArray a = parse_npy(npy_bytes("{'descr': '|b1', 'fortran_order': False, 'shape': (3,), }",
                                    std::string("\x00\x02\xff", 3)), "b.npy");
  CHECK(a.bytes == fuse::ir::AlignedBytes{0, 1, 1});
}

TEST_CASE("malformed files are rejected with a message naming the file and the problem", "[npy]") {
  const std::string ok_dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }";
  const std::string two_floats = raw<float>({1, 2});
  struct Case {
    std::string bytes;
    std::string message;
  };
  std::vector<Case> cases = {
      {"", "not a .npy file"},
      {"PK\x03\x04 a zip file", "not a .npy file"},
      {"\x93NUMPY\x01", "truncated .npy header"},
      {std::string("\x93NUMPY\x04\x00\x10\x00", 10) + "{}", "unsupported .npy format version 4.0"},
      {std::string("\x93NUMPY\x01\x00\xff\x00", 10) + ok_dict, "truncated .npy header"},
      {npy_bytes("{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }", two_floats), "big-endian"},
      {npy_bytes("{'descr': '<f2', 'fortran_order': False, 'shape': (2,), }", two_floats), "unsupported dtype '<f2'"},
      {npy_bytes("{'descr': '<u4', 'fortran_order': False, 'shape': (2,), }", two_floats), "unsupported dtype '<u4'"},
      {npy_bytes("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2,), }", two_floats), "expected a quoted string"},
      {npy_bytes("{'descr': '<f4', 'shape': (2,), }", two_floats), "lacks 'fortran_order'"},
      {npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'x': 1}", two_floats), "unknown key 'x'"},
      {npy_bytes("{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (2,)}", two_floats), "duplicate key 'descr'"},
      {npy_bytes("{'descr': '<f4', 'fortran_order': Nope, 'shape': (2,), }", two_floats), "expected True or False"},
      {npy_bytes("{'descr': '<f4, 'fortran_order': False, 'shape': (2,), }", two_floats), "malformed .npy header"},
      {npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), ", two_floats), "malformed .npy header"},
      {npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), } junk", two_floats), "unexpected text after"},
      {npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (-2,), }", two_floats), "negative dimension"},
      {npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (2.5,), }", two_floats), "expected ','"},
      {npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,), }", two_floats), "dimension too large"},
      {npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296), }", two_floats), "too many elements"},
      {npy_bytes("{'descr': '<f8', 'fortran_order': False, 'shape': (3037000499, 3037000499), }", two_floats), "too many elements"},
      {npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (1000000000000,), }", two_floats), "truncated data"},
      {npy_bytes(ok_dict, two_floats.substr(0, 7)), "truncated data: shape [2] of f32 needs 8 bytes, the file has 7"},
      {npy_bytes(ok_dict, two_floats + "x"), "unexpected extra data"},
  };
  for (const Case& c : cases) {
    INFO("expecting: " << c.message);
    std::string message = parse_error(c.bytes);
    CHECK(message.find("t.npy: ") != std::string::npos);
    CHECK(message.find(c.message) != std::string::npos);
  }
}

// Found while writing tests/fuzz/fuzz_npy.cpp; the harness on the old reader gave a UBSan report
// (signed overflow in row_major_strides) for the Fortran-ordered cases.
TEST_CASE("hostile inputs: lying headers give clean errors", "[npy][fuzz]") {
  // A 0 dim empties the array, but strides multiply the other dims: their product must fit int64.
  for (const char* shape : {"(0, 4294967296, 4294967296)", "(0, 4294967296, 2147483648)"})
    for (const char* order : {"False", "True"})
      CHECK(parse_error(npy_bytes("{'descr': '<f4', 'fortran_order': " + std::string(order) +
                                  ", 'shape': " + shape + ", }", "")).find("too many elements") != std::string::npos);
  HostArray empty = parse_npy(npy_bytes("{'descr': '<f4', 'fortran_order': True, 'shape': (0, 4294967296, 2147483647), }", ""), "e.npy");
  CHECK(empty.shape == fuse::ir::ConcreteShape{0, 4294967296, 2147483647});
  CHECK(empty.bytes.empty());
}

TEST_CASE("a header over 64 KiB is written as version 2.0", "[npy]") {
  HostArray a(DType::I32, fuse::ir::ConcreteShape(30000, 1));
  std::string bytes = serialize_npy(a);
  CHECK(bytes[6] == 2);
  size_t header_len = 0;
  for (int i = 0; i < 4; ++i) header_len |= static_cast<size_t>(static_cast<unsigned char>(bytes[8 + i])) << (8 * i);
  CHECK(header_len > 0xffff);
  CHECK((12 + header_len) % 64 == 0);
  CHECK(same(parse_npy(bytes, "big.npy"), a));
}

TEST_CASE("reading a missing file names it", "[npy]") {
  CHECK_THROWS_WITH(read_npy("/nonexistent/x.npy"),
                    Catch::Contains("cannot read '/nonexistent/x.npy'") &&
                        Catch::Contains("No such file"));
  CHECK_THROWS_WITH(write_npy("/nonexistent/x.npy", HostArray::scalar<float>(1)),
                    Catch::Contains("cannot write '/nonexistent/x.npy'"));
}

TEST_CASE("array_repr prints like NumPy", "[npy][repr]") {
  CHECK(array_repr(HostArray::from<float>({3}, {1.5f, 2.25f, 3}), "y = ") ==
        "y = array([1.5 , 2.25, 3.  ], dtype=float32)");
  CHECK(array_repr(HostArray::from<double>({2, 3}, {1, 2, 3, 4, 5, 6})) ==
        "array([[1., 2., 3.],\n       [4., 5., 6.]])");
  CHECK(array_repr(HostArray::from<double>({3}, {1e10, 1.5, 0.1})) ==
        "array([1.0e+10, 1.5e+00, 1.0e-01])");
  CHECK(array_repr(HostArray::from<float>({3}, {0.1f, NAN, -INFINITY})) ==
        "array([ 0.1,  nan, -inf], dtype=float32)");
  CHECK(array_repr(HostArray::from<float>({2}, {1.0f / 3, 0.1f})) ==
        "array([0.33333334, 0.1       ], dtype=float32)");
  CHECK(array_repr(HostArray::from<int32_t>({4}, {1, -20, 300, 4})) ==
        "array([  1, -20, 300,   4], dtype=int32)");
  CHECK(array_repr(HostArray::from<int64_t>({2}, {7, 8})) == "array([7, 8])");
  CHECK(array_repr(HostArray::from<bool>({3}, {true, false, true})) ==
        "array([ True, False,  True])");
  CHECK(array_repr(HostArray::scalar<float>(1.5f)) == "array(1.5, dtype=float32)");
  CHECK(array_repr(HostArray::scalar<bool>(true)) == "array(True)");
  CHECK(array_repr(HostArray(DType::F32, {0})) == "array([], dtype=float32)");
  CHECK(array_repr(HostArray(DType::F64, {0, 3})) == "array([], shape=(0, 3), dtype=float64)");
}

TEST_CASE("array_repr wraps long rows and summarizes big arrays", "[npy][repr]") {
  std::vector<int64_t> v(2000);
  for (int i = 0; i < 2000; ++i) v[i] = i;
  CHECK(array_repr(HostArray::from<int64_t>({2000}, v)) ==
        "array([   0,    1,    2, ..., 1997, 1998, 1999])");
  CHECK(array_repr(HostArray::from<int64_t>({40, 50}, v)) ==
        "array([[   0,    1,    2, ...,   47,   48,   49],\n"
        "       [  50,   51,   52, ...,   97,   98,   99],\n"
        "       [ 100,  101,  102, ...,  147,  148,  149],\n"
        "       ...,\n"
        "       [1850, 1851, 1852, ..., 1897, 1898, 1899],\n"
        "       [1900, 1901, 1902, ..., 1947, 1948, 1949],\n"
        "       [1950, 1951, 1952, ..., 1997, 1998, 1999]])");
  std::vector<int64_t> w(30);
  for (int i = 0; i < 30; ++i) w[i] = i * 1000;
  CHECK(array_repr(HostArray::from<int64_t>({30}, w)) ==
        "array([    0,  1000,  2000,  3000,  4000,  5000,  6000,  7000,  8000,\n"
        "        9000, 10000, 11000, 12000, 13000, 14000, 15000, 16000, 17000,\n"
        "       18000, 19000, 20000, 21000, 22000, 23000, 24000, 25000, 26000,\n"
        "       27000, 28000, 29000])");
  std::vector<float> f(12, 0.5f);
  CHECK(array_repr(HostArray::from<float>({2, 2, 3}, f)) ==
        "array([[[0.5, 0.5, 0.5],\n"
        "        [0.5, 0.5, 0.5]],\n"
        "\n"
        "       [[0.5, 0.5, 0.5],\n"
        "        [0.5, 0.5, 0.5]]], dtype=float32)");
}
