#include "ir/host_array.h"

#include <sys/mman.h>

#include <cmath>
#include <limits>

namespace fuse::ir {

// Large arrays on 2 MiB pages: a 4096 x 4096 f32 transpose, whose tiles read 16 rows 16 KiB
// apart (each row on pages of its own), took 10.8-11.4 ms on 4 KiB pages and 6.1-7.9 on 2 MiB
// ones (the Intel Xeon, two threads, the same kernel object in a C harness): the TLB, not the
// memory, bounded it. Only a hint: where transparent huge pages are off, nothing changes.
void* allocate_host_array_bytes(std::size_t bytes) {
  if (bytes < kHugePageBytes) return ::operator new(bytes, std::align_val_t{64});
  void* p = ::operator new(bytes, std::align_val_t{kHugePageBytes});
  madvise(p, bytes, MADV_HUGEPAGE);
  return p;
}

void free_host_array_bytes(void* p, std::size_t bytes) noexcept {
  ::operator delete(p, std::align_val_t{bytes < kHugePageBytes ? std::size_t{64} : kHugePageBytes});
}

HostArray::HostArray(DType dtype_, ConcreteShape shape_)
    : dtype(dtype_), shape(std::move(shape_)),
      bytes(static_cast<size_t>(num_elements(shape)) * dtype_size(dtype_), 0) {}

int64_t saturating_to_int(double v, DType int_type) {
  if (int_type == DType::Bool) return v != 0.0;  // NaN is true, as in NumPy and set_f64
  if (std::isnan(v)) return 0;
  double lo = int_type == DType::I32 ? -2147483648.0 : -9223372036854775808.0;
  double hi = int_type == DType::I32 ? 2147483647.0 : 9223372036854775807.0;
  if (v <= lo) return int_type == DType::I32 ? std::numeric_limits<int32_t>::min()
                                             : std::numeric_limits<int64_t>::min();
  if (v >= hi) return int_type == DType::I32 ? std::numeric_limits<int32_t>::max()
                                             : std::numeric_limits<int64_t>::max();
  return static_cast<int64_t>(v);
}

double HostArray::get_f64(int64_t i) const {
  switch (dtype) {
    case DType::Bool: return bytes[i];
    case DType::I32: return as<int32_t>()[i];
    case DType::I64: return static_cast<double>(as<int64_t>()[i]);
    case DType::F32: return as<float>()[i];
    case DType::F64: return as<double>()[i];
  }
  return 0;
}

int64_t HostArray::get_i64(int64_t i) const {
  switch (dtype) {
    case DType::Bool: return bytes[i];
    case DType::I32: return as<int32_t>()[i];
    case DType::I64: return as<int64_t>()[i];
    case DType::F32: return saturating_to_int(as<float>()[i], DType::I64);
    case DType::F64: return saturating_to_int(as<double>()[i], DType::I64);
  }
  return 0;
}

void HostArray::set_f64(int64_t i, double v) {
  switch (dtype) {
    case DType::Bool: bytes[i] = v != 0.0; break;
    case DType::I32: as<int32_t>()[i] = static_cast<int32_t>(saturating_to_int(v, DType::I32)); break;
    case DType::I64: as<int64_t>()[i] = saturating_to_int(v, DType::I64); break;
    case DType::F32: as<float>()[i] = static_cast<float>(v); break;
    case DType::F64: as<double>()[i] = v; break;
  }
}

void HostArray::set_i64(int64_t i, int64_t v) {
  switch (dtype) {
    case DType::Bool: bytes[i] = v != 0; break;
    case DType::I32: as<int32_t>()[i] = static_cast<int32_t>(static_cast<uint32_t>(v)); break;
    case DType::I64: as<int64_t>()[i] = v; break;
    case DType::F32: as<float>()[i] = static_cast<float>(v); break;
    case DType::F64: as<double>()[i] = static_cast<double>(v); break;
  }
}

std::vector<double> HostArray::to_doubles() const {
  std::vector<double> out(size());
  for (int64_t i = 0; i < size(); ++i) out[i] = get_f64(i);
  return out;
}

HostArray HostArray::cast(DType to) const {
  HostArray out(to, shape);
  bool exact_ints = !is_float(dtype);
  for (int64_t i = 0; i < size(); ++i) {
    if (exact_ints) out.set_i64(i, get_i64(i));
    else out.set_f64(i, get_f64(i));
  }
  return out;
}

}  // namespace fuse::ir
