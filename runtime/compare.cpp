#include "runtime/compare.h"

#include <cmath>
#include <cstdio>

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
