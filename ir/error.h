// The one exception type fuse throws for problems in user input, with the user's location.
//
// Thread safety: an exception value; safe from any thread.
#pragma once

#include <stdexcept>
#include <string>

namespace fuse::ir {

/// Where in user code something was made: a .expr file position or a C++ caller's file:line.
struct SourceLoc {
  std::string file;  // empty when unknown
  int line = 0;
  int col = 0;       // 0 when unknown (C++ callers report lines only)

  bool known() const { return !file.empty(); }
  std::string str() const;  // "file:line:col", "file:line", or "<unknown>"
};

/// A user-facing error: bad shapes, bad axes, wrong arity, unbound symbols, bad inputs.
/// what() is "file:line[:col]: error: message" when the location is known.
class Error : public std::runtime_error {
 public:
  explicit Error(std::string message, SourceLoc loc = {});
  const std::string& message() const { return message_; }
  const SourceLoc& loc() const { return loc_; }

 private:
  std::string message_;
  SourceLoc loc_;
};

}  // namespace fuse::ir
