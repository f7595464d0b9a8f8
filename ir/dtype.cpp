#include "ir/dtype.h"

namespace fuse::ir {

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::Bool: return "bool";
    case DType::I32: return "i32";
    case DType::I64: return "i64";
    case DType::F32: return "f32";
    case DType::F64: return "f64";
  }
  return "?";
}

std::optional<DType> dtype_from_name(std::string_view name) {
  for (DType t : kAllDTypes)
    if (dtype_name(t) == name) return t;
  return std::nullopt;
}

std::size_t dtype_size(DType t) {
  switch (t) {
    case DType::Bool: return 1;
    case DType::I32: return 4;
    case DType::I64: return 8;
    case DType::F32: return 4;
    case DType::F64: return 8;
  }
  return 0;
}

DType promote(DType a, DType b) { return static_cast<int>(a) >= static_cast<int>(b) ? a : b; }

DType arithmetic_type(DType t) { return t == DType::Bool ? DType::I32 : t; }

DType float_type(DType t) { return is_float(t) ? t : DType::F32; }

}  // namespace fuse::ir
