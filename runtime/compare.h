// Comparing arrays within a tolerance: what fuse-run --expect and the tests use to hold
// compiled results to the reference interpreter's.
//
// Thread safety: pure functions; safe from any thread.
#pragma once

#include <string>

#include "ir/host_array.h"

namespace fuse::runtime {

/// "" when `actual` matches `expected`: same dtype and shape; bool and integer elements equal;
/// float elements within |e - a| <= atol + rtol * |e|, NaN equal to NaN, an infinity only to the
/// same infinity. Otherwise what differs, starting with `what` (e.g. "output 'y'"), and the
/// first element that does.
std::string compare_arrays(const ir::HostArray& expected, const ir::HostArray& actual, double rtol, double atol,
                           const std::string& what);

/// The bound-aware comparison: `bounds` (f64, the shape of `expected`) holds each element's error
/// bound δ from the rounding model (ir/rounding_model.h). An element with δ = inf is not checked
/// (a decision the model cannot make, e.g. a comparison of values within their bounds). Otherwise
/// NaN equals only NaN and an infinity only the same infinity; finite elements must satisfy
/// |e - a| <= allowed_error(e, δ): kBoundSafety * δ, plus for floats kFinalUlps ulps of e in its
/// dtype (the reference's own final rounding and the backend's). "" when every element passes,
/// else `what`, the first element that does not, its bound and the worst ratio (bounded_error).
std::string compare_arrays(const ir::HostArray& expected, const ir::HostArray& actual, const ir::HostArray& bounds,
                           const std::string& what);

inline constexpr double kBoundSafety = 2;
inline constexpr double kFinalUlps = 4;

/// The largest |e - a| that compare_arrays with bounds accepts for an element of dtype `t`.
double allowed_error(double expected, double bound, ir::DType t);

/// How far `actual` is from `expected` in the terms of the bound-aware comparison.
struct BoundedError {
  double max_abs = 0;        // largest |e - a| over checked finite elements
  double max_rel = 0;        // largest |e - a| / |e| over checked finite elements
  double max_in_bounds = 0;  // largest |e - a| / allowed_error (inf for a NaN or infinity mismatch); <= 1 passes
  int64_t worst = -1;        // the flat index of max_in_bounds, -1 when every element is exact
  int64_t unchecked = 0;     // elements with an infinite bound
};
/// Same dtype and shape expected (an empty BoundedError with max_in_bounds = inf otherwise).
BoundedError bounded_error(const ir::HostArray& expected, const ir::HostArray& actual, const ir::HostArray& bounds);

/// `v` with every digit needed to read it back exactly (%.17g).
std::string format_double(double v);

/// The largest |e - a| over the float elements of two arrays of one dtype and shape (0 for
/// integers and bools; NaN pairs and equal infinities count 0).
double max_abs_difference(const ir::HostArray& expected, const ir::HostArray& actual);

}  // namespace fuse::runtime
