// A small JSON value with a strict parser and a printer: enough for AOT bundles' plan.json,
// without a dependency.
//
// Thread safety: plain values and pure functions; safe from any thread.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace fuse::runtime {

class Json {
 public:
  enum class Kind { Null, Bool, Number, String, Array, Object };

  Json() = default;
  Json(bool b) : kind_(Kind::Bool), bool_(b) {}                                          // NOLINT
  Json(int64_t n) : kind_(Kind::Number), text_(std::to_string(n)) {}                     // NOLINT
  Json(int n) : Json(static_cast<int64_t>(n)) {}                                         // NOLINT
  Json(std::string s) : kind_(Kind::String), text_(std::move(s)) {}                      // NOLINT
  Json(const char* s) : Json(std::string(s)) {}                                          // NOLINT
  static Json array(std::vector<Json> items = {});
  static Json object();

  /// Parses a whole document. Throws ir::Error "WHAT:LINE:COL: problem" on malformed input.
  static Json parse(std::string_view text, const std::string& what);
  /// Two-space indented text; arrays of scalars and small objects of them stay on one line.
  std::string dump() const;

  Kind kind() const { return kind_; }
  /// Object members in insertion order; `set` replaces or appends.
  Json& set(const std::string& key, Json value);
  Json& push(Json value);  // arrays

  // Typed access for readers: each throws ir::Error with `path` (e.g. "launches[0].block") when
  // the value has another kind, a member is missing or a number is not an exact int64.
  const Json& at(const std::string& key, const std::string& path) const;
  bool has(const std::string& key) const;
  const std::vector<Json>& items(const std::string& path) const;
  int64_t as_int(const std::string& path) const;
  const std::string& as_string(const std::string& path) const;

 private:
  Kind kind_ = Kind::Null;
  bool bool_ = false;
  std::string text_;  // a string's value, or a number as written
  std::vector<Json> items_;
  std::vector<std::pair<std::string, Json>> members_;

  void dump_to(std::string& out, int indent) const;
  friend class JsonParser;
};

}  // namespace fuse::runtime
