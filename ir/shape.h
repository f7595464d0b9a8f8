// Tensor shapes whose dims are integer expressions of named symbols (`4`, `N`, `2*N*M`, `N - 2`,
// `N // 2`, `max(N - 2, 0)`).
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

struct Dim;

/// One factor of a Dim term: a symbol, or an opaque `floor(dividend / divisor)`, `min(args)` or
/// `max(args)` node. Ceiling division has no node of its own: ceil(x / c) is floor((x + c - 1) / c).
struct DimAtom {
  enum class Kind { Symbol, FloorDiv, Min, Max };
  Kind kind = Kind::Symbol;
  std::string name;       // Symbol
  std::vector<Dim> args;  // FloorDiv: {dividend}; Min/Max: two or more, sorted, distinct
  int64_t divisor = 0;    // FloorDiv: > 1
  bool operator==(const DimAtom& o) const;
};

/// coef * (product of atoms); the atoms sorted (repeats allowed: N*N).
struct DimTerm {
  int64_t coef = 0;
  std::vector<DimAtom> atoms;
  bool operator==(const DimTerm& o) const;
};

/// One dimension: an integer expression of symbols (`4`, `N`, `2*N*M`, `N - 2`, `N // 2`,
/// `max(N - 2, 0)`), kept in a canonical form so that equal expressions compare equal
/// structurally: a sum of terms with non-zero integer coefficients, sorted, like terms merged.
/// min/max flatten, sort and drop arguments dominated by another (they differ by a constant);
/// floor division splits off the terms the divisor divides ((2*N + 1) // 2 is N).
/// Symbols are bound to sizes at run time from the actual inputs.
struct Dim {
  std::vector<DimTerm> terms;  // canonical order (compare_dims); none for 0

  Dim() = default;  // 0 (no terms); before dims were expressions a default Dim was 1
  Dim(int64_t value);  // NOLINT: constants convert implicitly
  static Dim symbol(std::string name);

  bool is_constant() const { return terms.empty() || (terms.size() == 1 && terms[0].atoms.empty()); }
  std::optional<int64_t> constant() const;
  /// The symbol's name when the dim is exactly one symbol (what inputs bind from).
  std::optional<std::string> as_symbol() const;
  /// Every symbol the expression mentions, sorted, each once.
  std::vector<std::string> symbol_names() const;
  bool operator==(const Dim& o) const { return terms == o.terms; }
  std::string str() const;  // "4", "N", "2*M*N", "N - 2", "N // 2", "(N + 1) // 2", "max(N - 2, 0)"
};

/// Total order of the canonical form: <0, 0, >0.
int compare_dims(const Dim& a, const Dim& b);

/// Parses what Dim::str() prints: integers, symbols, `+`, `-` (also leading), `*`, `//` by a
/// positive constant, `min(a, b, ...)`, `max(a, b, ...)` and parentheses, spaces allowed. Throws
/// Error naming the text when it is not one, or is a negative constant.
Dim parse_dim(std::string_view text);

// Arithmetic on dims; each throws Error when a coefficient overflows 64 bits.
Dim operator+(const Dim& a, const Dim& b);
Dim operator-(const Dim& a, const Dim& b);
Dim operator*(const Dim& a, const Dim& b);
/// floor(a / divisor) and ceil(a / divisor); throw Error unless divisor > 0.
Dim floor_div(const Dim& a, int64_t divisor);
Dim ceil_div(const Dim& a, int64_t divisor);
Dim dim_min(const Dim& a, const Dim& b);
Dim dim_max(const Dim& a, const Dim& b);
/// a / b when b divides a exactly term by term (e.g. N*M / M = N, 12 / 4 = 3, (2*N + 4) / 2 =
/// N + 2), else nullopt.
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
/// Also throws Error when a dim is negative (`N - 4` with N = 3).
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
