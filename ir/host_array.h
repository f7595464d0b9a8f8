// A dense row-major array in host memory: what the interpreter reads and writes, and what
// .npy files and tests exchange with the rest of fuse.
#pragma once

#include <cstddef>
#include <cstdint>
#include <new>
#include <string>
#include <type_traits>
#include <vector>

#include "ir/dtype.h"
#include "ir/shape.h"

namespace fuse::ir {

/// C++ element type of each DType (bool is stored as one byte, 0 or 1).
template <DType T> struct ElementOf;
template <> struct ElementOf<DType::Bool> { using type = uint8_t; };
template <> struct ElementOf<DType::I32> { using type = int32_t; };
template <> struct ElementOf<DType::I64> { using type = int64_t; };
template <> struct ElementOf<DType::F32> { using type = float; };
template <> struct ElementOf<DType::F64> { using type = double; };

template <class T> constexpr DType dtype_of();
template <> constexpr DType dtype_of<bool>() { return DType::Bool; }
template <> constexpr DType dtype_of<int32_t>() { return DType::I32; }
template <> constexpr DType dtype_of<int64_t>() { return DType::I64; }
template <> constexpr DType dtype_of<float>() { return DType::F32; }
template <> constexpr DType dtype_of<double>() { return DType::F64; }

/// Storage for HostArray: 64-byte aligned, and from kHugePageBytes on, 2 MiB aligned and
/// advised to use transparent huge pages (host_array.cpp).
void* allocate_host_array_bytes(std::size_t bytes);
void free_host_array_bytes(void* p, std::size_t bytes) noexcept;
inline constexpr std::size_t kHugePageBytes = std::size_t{2} << 20;

/// The allocator of HostArray's bytes: 64-byte aligned, a cache line and an AVX-512 vector.
/// std::allocator gives malloc's 16 bytes (a large block sits 16 bytes past a page boundary),
/// so every vector load of a compiled kernel straddled two lines, and row-wise kernels, which
/// write with non-temporal stores only where each row starts on a line, never did: an output
/// row broadcast (`a + b`, a[1000, 10000] + b[10000]) took 1.3-1.5 ms against 0.93-1.01 for a
/// C loop storing non-temporally (2-vCPU Zen 5 VM, bench/README.md).
template <class T>
struct CacheLineAllocator {
  using value_type = T;
  CacheLineAllocator() = default;
  template <class U>
  CacheLineAllocator(const CacheLineAllocator<U>&) noexcept {}
  T* allocate(std::size_t n) { return static_cast<T*>(allocate_host_array_bytes(n * sizeof(T))); }
  void deallocate(T* p, std::size_t n) noexcept { free_host_array_bytes(p, n * sizeof(T)); }
  template <class U>
  bool operator==(const CacheLineAllocator<U>&) const noexcept { return true; }
};

/// A HostArray's storage: bytes on 64-byte aligned memory.
using AlignedBytes = std::vector<uint8_t, CacheLineAllocator<uint8_t>>;

/// Thread safety: a plain value (like std::vector): concurrent reads are safe.
struct HostArray {
  DType dtype = DType::F32;
  ConcreteShape shape;
  AlignedBytes bytes;  // num_elements * dtype_size, row-major, 64-byte aligned

  HostArray() = default;
  HostArray(DType dtype, ConcreteShape shape);  // zero-filled

  /// From values of a C++ type matching the dtype (bool, int32_t, int64_t, float, double).
  template <class T>
  static HostArray from(ConcreteShape shape, const std::vector<T>& values);
  template <class T>
  static HostArray scalar(T value) { return from<T>({}, {value}); }

  int64_t size() const { return num_elements(shape); }
  int rank() const { return static_cast<int>(shape.size()); }
  void* data() { return bytes.data(); }
  const void* data() const { return bytes.data(); }
  template <class T> T* as() { return reinterpret_cast<T*>(bytes.data()); }
  template <class T> const T* as() const { return reinterpret_cast<const T*>(bytes.data()); }

  /// Element i (flat, row-major) read as a double / int64 whatever the dtype, and written back
  /// with the dtype's conversion (floats to ints truncate and saturate, NaN gives 0).
  double get_f64(int64_t i) const;
  int64_t get_i64(int64_t i) const;
  void set_f64(int64_t i, double v);
  void set_i64(int64_t i, int64_t v);

  /// Values as doubles, for tests and printing.
  std::vector<double> to_doubles() const;
  /// This array converted to another dtype.
  HostArray cast(DType to) const;
};

/// Converts a double to an integer the way fuse defines float->int casts: truncation toward
/// zero, saturating at the type's limits, NaN gives 0. To bool: v != 0 (so NaN gives true).
int64_t saturating_to_int(double v, DType int_type);

template <class T>
HostArray HostArray::from(ConcreteShape shape, const std::vector<T>& values) {
  HostArray a(dtype_of<T>(), std::move(shape));
  for (int64_t i = 0; i < a.size() && i < static_cast<int64_t>(values.size()); ++i) {
    if constexpr (std::is_same_v<T, bool>) a.bytes[i] = values[i] ? 1 : 0;
    else a.as<T>()[i] = values[i];
  }
  return a;
}

}  // namespace fuse::ir
