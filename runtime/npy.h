// NumPy interop on the host: the .npy file format, and NumPy's text form of an array.
//
// Thread safety: each call reads or writes its own file; safe from any thread (concurrent writes
// of the same path are not).
#pragma once

#include <string>
#include <string_view>

#include "ir/host_array.h"

namespace fuse::runtime {

/// Reads a .npy file (format 1.0, 2.0 or 3.0; little-endian; C or Fortran order, Fortran being
/// transposed into row-major) holding one of |b1 <i4 <i8 <f4 <f8. Anything else - a missing
/// file, big-endian data, another dtype, a malformed header, truncated data - throws
/// ir::Error naming the file and the problem.
ir::HostArray read_npy(const std::string& path);
/// NumPy's name of a dtype: "bool", "int32", "int64", "float32", "float64".
std::string_view numpy_dtype_name(ir::DType t);

/// The same from bytes already in memory; `what` names their origin in error messages.
ir::HostArray parse_npy(std::string_view bytes, const std::string& what);

/// Writes format 1.0 (2.0 when the header needs over 64 KiB, as NumPy does), C order, header
/// padded so the data starts at a multiple of 64 bytes.
void write_npy(const std::string& path, const ir::HostArray& array);
std::string serialize_npy(const ir::HostArray& array);

/// The array as NumPy's repr() prints it with default print options, e.g.
/// "array([1. , 2.5], dtype=float32)": shortest round-trip digits (at most 8 after the point),
/// aligned columns, nested brackets per dim, lines wrapped at 75 columns and arrays over 1000
/// elements summarized with "...". `label` (e.g. "y = ") is printed first and continuation lines
/// are indented past it.
std::string array_repr(const ir::HostArray& array, std::string_view label = "");

}  // namespace fuse::runtime
