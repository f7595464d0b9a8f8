// Element types of fuse tensors and the promotion rules between them.
//
// Thread safety: values and pure functions; safe from any thread.
#pragma once

#include <cstddef>
#include <optional>
#include <string_view>

namespace fuse::ir {

/// The element types, in promotion order: bool < i32 < i64 < f32 < f64.
enum class DType { Bool, I32, I64, F32, F64 };

inline constexpr DType kAllDTypes[] = {DType::Bool, DType::I32, DType::I64, DType::F32, DType::F64};

std::string_view dtype_name(DType t);                       // "bool", "i32", ...
std::optional<DType> dtype_from_name(std::string_view name); // inverse of dtype_name
std::size_t dtype_size(DType t);                             // bytes per element (bool: 1)
inline bool is_float(DType t) { return t == DType::F32 || t == DType::F64; }
inline bool is_integer(DType t) { return t == DType::I32 || t == DType::I64; }

/// The least type both a and b convert to without loss along the lattice
/// bool < i32 < i64 < f32 < f64 (so i64 with f32 gives f32, as in JAX's weak lattice).
DType promote(DType a, DType b);

/// Result type of arithmetic that needs a number rather than a truth value: bool becomes i32.
DType arithmetic_type(DType t);

/// Result type of true division and of transcendental functions: integers and bool become f32.
DType float_type(DType t);

}  // namespace fuse::ir
