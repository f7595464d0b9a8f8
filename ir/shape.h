// Tensor shapes whose dims are constants, named symbols, or products of them (`2*N*M`).
//
// Thread safety: plain values and pure functions; safe from any thread.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace fuse::ir {

/// One dimension: factor * (product of symbols). A plain constant has no symbols; a symbol `N`
/// is {1, {"N"}}; `N*M` is {1, {"M", "N"}} (symbols kept sorted so equal dims compare equal).
/// Symbols are bound to sizes at run time from the actual inputs.
struct Dim {
  int64_t factor = 1;
  std::vector<std::string> symbols;

  Dim() = default;
  Dim(int64_t value) : factor(value) {}  // NOLINT: constants convert implicitly
  static Dim symbol(std::string name);

  bool is_constant() const { return symbols.empty(); }
  std::optional<int64_t> constant() const;
  bool operator==(const Dim&) const = default;
  std::string str() const;  // "4", "N", "2*N*M"
};

/// Parses what Dim::str() prints: a product of non-negative integers and symbol names separated by
/// '*' ("4", "N", "2*N*M", spaces allowed). Throws Error naming the text when it is not one.
Dim parse_dim(std::string_view text);

Dim operator*(const Dim& a, const Dim& b);
/// a / b when b divides a exactly as a monomial (e.g. N*M / M = N, 12 / 4 = 3), else nullopt.
std::optional<Dim> exact_divide(const Dim& a, const Dim& b);

using Shape = std::vector<Dim>;
/// Symbol name -> size, as bound from the inputs of one run.
using SymbolBindings = std::map<std::string, int64_t>;
/// A shape with every dim known: what buffers and host arrays have.
using ConcreteShape = std::vector<int64_t>;

std::string shape_str(const Shape& s);          // "[N, 4]" ; scalars "[]"
std::string shape_str(const ConcreteShape& s);  // "[3, 4]"
Dim num_elements(const Shape& s);               // product of dims
int64_t num_elements(const ConcreteShape& s);
Shape to_shape(const ConcreteShape& s);

/// Evaluates a dim under bindings; throws fuse::ir::Error naming the unbound symbol.
int64_t evaluate(const Dim& d, const SymbolBindings& bindings);
ConcreteShape evaluate(const Shape& s, const SymbolBindings& bindings);

/// Binds the symbols of `declared` from `actual`, adding to `bindings`. Throws Error when the rank
/// differs, a constant dim differs, or a symbol already has another size. `what` names the
/// tensor in messages, e.g. "input 'x'".
void bind_symbols(const Shape& declared, const ConcreteShape& actual, SymbolBindings& bindings,
                  const std::string& what);

/// Row-major strides in elements.
std::vector<int64_t> row_major_strides(const ConcreteShape& s);

/// Normalizes a possibly negative axis for `rank`; nullopt when out of range.
std::optional<int> normalize_axis(int64_t axis, int rank);

}  // namespace fuse::ir
