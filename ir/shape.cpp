#include "ir/shape.h"

#include <algorithm>
#include <cctype>

#include "ir/error.h"

namespace fuse::ir {

Dim Dim::symbol(std::string name) {
  Dim d;
  d.symbols.push_back(std::move(name));
  return d;
}

std::optional<int64_t> Dim::constant() const {
  if (!is_constant()) return std::nullopt;
  return factor;
}

std::string Dim::str() const {
  if (symbols.empty()) return std::to_string(factor);
  std::string s = factor == 1 ? "" : std::to_string(factor) + "*";
  for (size_t i = 0; i < symbols.size(); ++i) s += (i ? "*" : "") + symbols[i];
  return s;
}

Dim parse_dim(std::string_view text) {
  auto fail = [&](const std::string& why) -> Error {
    return Error("'" + std::string(text) + "' is not a dim (" + why + "; expected e.g. 4, N or 2*N*M)");
  };
  Dim d;
  size_t pos = 0;
  auto skip_spaces = [&] { while (pos < text.size() && text[pos] == ' ') ++pos; };
  while (true) {
    skip_spaces();
    size_t start = pos;
    if (pos < text.size() && std::isdigit(static_cast<unsigned char>(text[pos]))) {
      int64_t value = 0;
      for (; pos < text.size() && std::isdigit(static_cast<unsigned char>(text[pos])); ++pos)
        if (__builtin_mul_overflow(value, 10, &value) || __builtin_add_overflow(value, text[pos] - '0', &value))
          throw fail("the number overflows 64 bits");
      if (__builtin_mul_overflow(d.factor, value, &d.factor)) throw fail("the product overflows 64 bits");
    } else if (pos < text.size() && (std::isalpha(static_cast<unsigned char>(text[pos])) || text[pos] == '_')) {
      while (pos < text.size() && (std::isalnum(static_cast<unsigned char>(text[pos])) || text[pos] == '_')) ++pos;
      d.symbols.emplace_back(text.substr(start, pos - start));
    } else {
      throw fail(pos < text.size() ? "unexpected '" + std::string(1, text[pos]) + "'" : "a factor is missing");
    }
    skip_spaces();
    if (pos == text.size()) break;
    if (text[pos] != '*') throw fail("unexpected '" + std::string(1, text[pos]) + "'");
    ++pos;
  }
  // The symbols are sorted once, not at each factor as operator* would: a long product (in a
  // hostile bundle) must not take quadratic time.
  if (d.factor == 0) d.symbols.clear();  // 0 * N is 0 whatever N is
  std::sort(d.symbols.begin(), d.symbols.end());
  return d;
}

Dim operator*(const Dim& a, const Dim& b) {
  Dim d;
  if (__builtin_mul_overflow(a.factor, b.factor, &d.factor))
    throw Error("dim " + a.str() + " * " + b.str() + " overflows 64 bits");
  if (d.factor == 0) return d;  // 0 * N is 0 whatever N is
  d.symbols = a.symbols;
  d.symbols.insert(d.symbols.end(), b.symbols.begin(), b.symbols.end());
  std::sort(d.symbols.begin(), d.symbols.end());
  return d;
}

std::optional<Dim> exact_divide(const Dim& a, const Dim& b) {
  if (b.factor == 0 || a.factor % b.factor != 0) return std::nullopt;
  Dim d;
  d.factor = a.factor / b.factor;
  d.symbols = a.symbols;
  for (const std::string& s : b.symbols) {
    auto it = std::find(d.symbols.begin(), d.symbols.end(), s);
    if (it == d.symbols.end()) return std::nullopt;
    d.symbols.erase(it);
  }
  return d;
}

std::string shape_str(const Shape& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + s[i].str();
  return out + "]";
}

std::string shape_str(const ConcreteShape& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

Dim num_elements(const Shape& s) {
  Dim n = 1;
  for (const Dim& d : s) n = n * d;
  return n;
}

int64_t num_elements(const ConcreteShape& s) {
  // A zero dim makes an empty array whatever the others are; otherwise the product must fit.
  if (std::find(s.begin(), s.end(), 0) != s.end()) return 0;
  int64_t n = 1;
  for (int64_t d : s)
    if (__builtin_mul_overflow(n, d, &n)) throw Error("shape " + shape_str(s) + " has more elements than 64 bits count");
  return n;
}

Shape to_shape(const ConcreteShape& s) { return Shape(s.begin(), s.end()); }

int64_t evaluate(const Dim& d, const SymbolBindings& bindings) {
  int64_t v = d.factor;
  for (const std::string& s : d.symbols) {
    auto it = bindings.find(s);
    if (it == bindings.end()) throw Error("symbol '" + s + "' is not bound to a size");
    if (__builtin_mul_overflow(v, it->second, &v))
      throw Error("dim " + d.str() + " overflows 64 bits with " + s + " = " + std::to_string(it->second));
  }
  return v;
}

ConcreteShape evaluate(const Shape& s, const SymbolBindings& bindings) {
  ConcreteShape out;
  out.reserve(s.size());
  for (const Dim& d : s) out.push_back(evaluate(d, bindings));
  return out;
}

void bind_symbols(const Shape& declared, const ConcreteShape& actual, SymbolBindings& bindings,
                  const std::string& what) {
  auto mismatch = [&] {
    return Error(what + " has shape " + shape_str(actual) + " but " + shape_str(declared) +
                 " was declared");
  };
  if (declared.size() != actual.size()) throw mismatch();
  for (size_t i = 0; i < declared.size(); ++i) {
    const Dim& d = declared[i];
    if (d.is_constant()) {
      if (d.factor != actual[i]) throw mismatch();
    } else if (d.symbols.size() == 1 && d.factor == 1) {
      const std::string& sym = d.symbols[0];
      auto [it, inserted] = bindings.emplace(sym, actual[i]);
      if (!inserted && it->second != actual[i])
        throw Error("symbol '" + sym + "' is bound to " + std::to_string(it->second) +
                    " but " + what + " gives it size " + std::to_string(actual[i]) + " (shape " +
                    shape_str(actual) + ", declared " + shape_str(declared) + ")");
    }
  }
  // Compound dims (2*N, N*M) are checked once every plain symbol is bound.
  for (size_t i = 0; i < declared.size(); ++i) {
    const Dim& d = declared[i];
    if (d.is_constant() || (d.symbols.size() == 1 && d.factor == 1)) continue;
    bool all_bound = std::all_of(d.symbols.begin(), d.symbols.end(),
                                 [&](const std::string& s) { return bindings.count(s) > 0; });
    if (all_bound && evaluate(d, bindings) != actual[i]) throw mismatch();
  }
}

std::vector<int64_t> row_major_strides(const ConcreteShape& s) {
  std::vector<int64_t> strides(s.size());
  int64_t stride = 1;
  for (size_t i = s.size(); i-- > 0;) {
    strides[i] = stride;
    stride *= s[i];
  }
  return strides;
}

std::optional<int> normalize_axis(int64_t axis, int rank) {
  if (axis < -rank || axis >= rank) return std::nullopt;
  return static_cast<int>(axis < 0 ? axis + rank : axis);
}

}  // namespace fuse::ir
