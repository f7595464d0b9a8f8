// Comparing arrays within a tolerance: what fuse-run --expect and the tests use to hold
// compiled results to the reference interpreter's.
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

/// `v` with every digit needed to read it back exactly (%.17g).
std::string format_double(double v);

/// The largest |e - a| over the float elements of two arrays of one dtype and shape (0 for
/// integers and bools; NaN pairs and equal infinities count 0).
double max_abs_difference(const ir::HostArray& expected, const ir::HostArray& actual);

}  // namespace fuse::runtime
