// Positions, the front end's internal error exception, and the collector that turns errors
// into sorted, capped Diagnostics.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "frontends/expr/compile.h"

namespace fuse::expr {

/// 1-based line and byte column in the source.
struct Pos {
  int line = 1;
  int col = 1;
};

/// Thrown inside the front end to abandon the current statement; the statement loop catches it,
/// records it and goes on with the next statement.
struct CompileError {
  Pos pos;
  std::string message;
};

/// Counts one level of recursion and throws `message` at `pos` past `limit`: deep input gives
/// an error, never a stack overflow.
class DepthGuard {
 public:
  DepthGuard(int& depth, int limit, Pos pos, std::string_view message) : depth_(depth) {
    if (depth_ >= limit) throw CompileError{pos, std::string(message)};
    ++depth_;
  }
  ~DepthGuard() { --depth_; }
  DepthGuard(const DepthGuard&) = delete;
  DepthGuard& operator=(const DepthGuard&) = delete;

 private:
  int& depth_;
};

/// Most diagnostics one compilation reports.
inline constexpr size_t kMaxErrors = 20;

class Diagnostics {
 public:
  explicit Diagnostics(std::string file) : file_(std::move(file)) {}
  void error(Pos pos, std::string message);
  void error(const CompileError& e) { error(e.pos, e.message); }
  bool empty() const { return errors_.empty(); }
  ir::SourceLoc loc(Pos pos) const { return {file_, pos.line, pos.col}; }
  /// The errors in source order, at most kMaxErrors.
  std::vector<Diagnostic> take();

 private:
  std::string file_;
  std::vector<Diagnostic> errors_;
};

/// "; did you mean 'x'?" for the candidate closest to `name` by edit distance, when close
/// enough to be a likely typo; otherwise "".
std::string did_you_mean(std::string_view name, const std::vector<std::string_view>& candidates);

}  // namespace fuse::expr
