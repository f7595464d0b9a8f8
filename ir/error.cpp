#include "ir/error.h"

namespace fuse::ir {

std::string SourceLoc::str() const {
  if (!known()) return "<unknown>";
  std::string s = file + ":" + std::to_string(line);
  if (col > 0) s += ":" + std::to_string(col);
  return s;
}

static std::string format_error(const std::string& message, const SourceLoc& loc) {
  return loc.known() ? loc.str() + ": error: " + message : "error: " + message;
}

Error::Error(std::string message, SourceLoc loc)
    : std::runtime_error(format_error(message, loc)), message_(std::move(message)), loc_(std::move(loc)) {}

}  // namespace fuse::ir
