#include "runtime/compare.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

namespace fuse::runtime {

std::string format_double(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

std::string compare_arrays(const ir::HostArray& e, const ir::HostArray& a, double rtol, double atol,
                           const std::string& what) {
  if (e.dtype != a.dtype)
    return what + " is " + std::string(ir::dtype_name(a.dtype)) + ", expected " + std::string(ir::dtype_name(e.dtype));
  if (e.shape != a.shape) return what + " has shape " + ir::shape_str(a.shape) + ", expected " + ir::shape_str(e.shape);
  for (int64_t i = 0; i < e.size(); ++i) {
    bool same;
    std::string ev, av;
    if (ir::is_float(e.dtype)) {
      double x = e.get_f64(i), y = a.get_f64(i);
      if (std::isnan(x) || std::isnan(y)) same = std::isnan(x) && std::isnan(y);
      else if (std::isinf(x) || std::isinf(y)) same = x == y;
      else same = std::fabs(x - y) <= atol + rtol * std::fabs(x);
      ev = format_double(x);
      av = format_double(y);
    } else {
      same = e.get_i64(i) == a.get_i64(i);
      ev = std::to_string(e.get_i64(i));
      av = std::to_string(a.get_i64(i));
    }
    if (!same)
      return what + " (" + std::string(ir::dtype_name(e.dtype)) + ir::shape_str(e.shape) + ") differs at flat index " +
             std::to_string(i) + ": expected " + ev + ", got " + av;
  }
  return "";
}

double allowed_error(double expected, double bound, ir::DType t) {
  double allowed = kBoundSafety * bound;
  if (t == ir::DType::F32) {
    float e = std::fabs(static_cast<float>(expected));
    allowed += kFinalUlps * (static_cast<double>(std::nextafter(e, std::numeric_limits<float>::infinity())) - e);
  } else if (t == ir::DType::F64) {
    double e = std::fabs(expected);
    allowed += kFinalUlps * (std::nextafter(e, std::numeric_limits<double>::infinity()) - e);
  }
  return allowed;
}

namespace {

// |e - a| / allowed_error for one checked element: 0 when equal (NaN and NaN, the same
// infinity), inf for any other NaN or infinity, or a nonzero difference with nothing allowed.
double in_bounds(double e, double a, double bound, ir::DType t) {
  if (std::isnan(e) || std::isnan(a)) return std::isnan(e) && std::isnan(a) ? 0 : INFINITY;
  if (e == a) return 0;
  if (std::isinf(e) || std::isinf(a)) return INFINITY;
  double allowed = allowed_error(e, bound, t);
  return allowed > 0 ? std::fabs(e - a) / allowed : INFINITY;
}

}  // namespace

BoundedError bounded_error(const ir::HostArray& e, const ir::HostArray& a, const ir::HostArray& bounds) {
  BoundedError r;
  if (e.dtype != a.dtype || e.shape != a.shape || bounds.shape != e.shape) {
    r.max_in_bounds = INFINITY;
    return r;
  }
  bool floats = ir::is_float(e.dtype);
  for (int64_t i = 0; i < e.size(); ++i) {
    double bound = bounds.get_f64(i);
    if (std::isinf(bound)) {
      ++r.unchecked;
      continue;
    }
    double x = floats ? e.get_f64(i) : static_cast<double>(e.get_i64(i));
    double y = floats ? a.get_f64(i) : static_cast<double>(a.get_i64(i));
    double ratio = in_bounds(x, y, bound, e.dtype);
    if (ratio > r.max_in_bounds || (r.worst < 0 && ratio > 0)) {
      r.max_in_bounds = ratio;
      r.worst = i;
    }
    if (std::isfinite(x) && std::isfinite(y)) {
      double diff = std::fabs(x - y);
      r.max_abs = std::max(r.max_abs, diff);
      if (diff > 0 && x != 0) r.max_rel = std::max(r.max_rel, diff / std::fabs(x));
    }
  }
  return r;
}

std::string compare_arrays(const ir::HostArray& e, const ir::HostArray& a, const ir::HostArray& bounds,
                           const std::string& what) {
  if (e.dtype != a.dtype)
    return what + " is " + std::string(ir::dtype_name(a.dtype)) + ", expected " + std::string(ir::dtype_name(e.dtype));
  if (e.shape != a.shape) return what + " has shape " + ir::shape_str(a.shape) + ", expected " + ir::shape_str(e.shape);
  if (bounds.shape != e.shape)
    return what + ": the bounds have shape " + ir::shape_str(bounds.shape) + ", the values " + ir::shape_str(e.shape);
  bool floats = ir::is_float(e.dtype);
  for (int64_t i = 0; i < e.size(); ++i) {
    double bound = bounds.get_f64(i);
    if (std::isinf(bound)) continue;
    double x = floats ? e.get_f64(i) : static_cast<double>(e.get_i64(i));
    double y = floats ? a.get_f64(i) : static_cast<double>(a.get_i64(i));
    if (in_bounds(x, y, bound, e.dtype) <= 1) continue;
    std::string ev = floats ? format_double(x) : std::to_string(e.get_i64(i));
    std::string av = floats ? format_double(y) : std::to_string(a.get_i64(i));
    BoundedError worst = bounded_error(e, a, bounds);
    return what + " (" + std::string(ir::dtype_name(e.dtype)) + ir::shape_str(e.shape) + ") differs at flat index " +
           std::to_string(i) + ": expected " + ev + ", got " + av + ", error bound " + format_double(bound) +
           " (allowed " + format_double(allowed_error(x, bound, e.dtype)) + "); worst " +
           format_double(worst.max_in_bounds) + " times the allowed error at flat index " + std::to_string(worst.worst);
  }
  return "";
}

double max_abs_difference(const ir::HostArray& e, const ir::HostArray& a) {
  double worst = 0;
  if (!ir::is_float(e.dtype) || e.dtype != a.dtype || e.shape != a.shape) return worst;
  for (int64_t i = 0; i < e.size(); ++i) {
    double x = e.get_f64(i), y = a.get_f64(i);
    if (std::isnan(x) || std::isnan(y) || std::isinf(x) || std::isinf(y)) continue;
    worst = std::max(worst, std::fabs(x - y));
  }
  return worst;
}

}  // namespace fuse::runtime
