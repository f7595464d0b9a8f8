#include "ir/shape.h"

#include <algorithm>
#include <cctype>
#include <iterator>
#include <set>

#include "ir/error.h"

namespace fuse::ir {

// ---- canonical order ----

static int compare_atoms(const DimAtom& a, const DimAtom& b);

static int compare_atom_lists(const std::vector<DimAtom>& a, const std::vector<DimAtom>& b) {
  for (size_t i = 0; i < a.size() && i < b.size(); ++i)
    if (int c = compare_atoms(a[i], b[i])) return c;
  return a.size() < b.size() ? -1 : a.size() > b.size() ? 1 : 0;
}

static int compare_dim_lists(const std::vector<Dim>& a, const std::vector<Dim>& b) {
  for (size_t i = 0; i < a.size() && i < b.size(); ++i)
    if (int c = compare_dims(a[i], b[i])) return c;
  return a.size() < b.size() ? -1 : a.size() > b.size() ? 1 : 0;
}

static int compare_atoms(const DimAtom& a, const DimAtom& b) {
  if (a.kind != b.kind) return a.kind < b.kind ? -1 : 1;
  if (a.kind == DimAtom::Kind::Symbol) return a.name < b.name ? -1 : a.name > b.name ? 1 : 0;
  if (a.divisor != b.divisor) return a.divisor < b.divisor ? -1 : 1;
  return compare_dim_lists(a.args, b.args);
}

int compare_dims(const Dim& a, const Dim& b) {
  for (size_t i = 0; i < a.terms.size() && i < b.terms.size(); ++i) {
    if (int c = compare_atom_lists(a.terms[i].atoms, b.terms[i].atoms)) return c;
    if (a.terms[i].coef != b.terms[i].coef) return a.terms[i].coef < b.terms[i].coef ? -1 : 1;
  }
  return a.terms.size() < b.terms.size() ? -1 : a.terms.size() > b.terms.size() ? 1 : 0;
}

bool DimAtom::operator==(const DimAtom& o) const { return compare_atoms(*this, o) == 0; }
bool DimTerm::operator==(const DimTerm& o) const { return coef == o.coef && compare_atom_lists(atoms, o.atoms) == 0; }

static bool atom_less(const DimAtom& a, const DimAtom& b) { return compare_atoms(a, b) < 0; }

/// Sorts the terms, merges like terms and drops zero coefficients: the canonical sum.
static Dim from_terms(std::vector<DimTerm> terms) {
  std::stable_sort(terms.begin(), terms.end(),
                   [](const DimTerm& a, const DimTerm& b) { return compare_atom_lists(a.atoms, b.atoms) < 0; });
  Dim d;
  for (DimTerm& t : terms) {
    if (!d.terms.empty() && compare_atom_lists(d.terms.back().atoms, t.atoms) == 0) {
      if (__builtin_add_overflow(d.terms.back().coef, t.coef, &d.terms.back().coef))
        throw Error("a dim's coefficient overflows 64 bits");
    } else {
      d.terms.push_back(std::move(t));
    }
    if (d.terms.back().coef == 0) d.terms.pop_back();
  }
  return d;
}

static Dim from_atom(DimAtom atom) {
  Dim d;
  d.terms.push_back({1, {std::move(atom)}});
  return d;
}

// ---- construction and queries ----

Dim::Dim(int64_t value) {
  if (value != 0) terms.push_back({value, {}});
}

Dim Dim::symbol(std::string name) {
  DimAtom a;
  a.name = std::move(name);
  return from_atom(std::move(a));
}

std::optional<int64_t> Dim::constant() const {
  if (!is_constant()) return std::nullopt;
  return terms.empty() ? 0 : terms[0].coef;
}

std::optional<std::string> Dim::as_symbol() const {
  if (terms.size() != 1 || terms[0].coef != 1 || terms[0].atoms.size() != 1 ||
      terms[0].atoms[0].kind != DimAtom::Kind::Symbol)
    return std::nullopt;
  return terms[0].atoms[0].name;
}

static void collect_symbols(const Dim& d, std::set<std::string>& names) {
  for (const DimTerm& t : d.terms)
    for (const DimAtom& a : t.atoms) {
      if (a.kind == DimAtom::Kind::Symbol) names.insert(a.name);
      for (const Dim& arg : a.args) collect_symbols(arg, names);
    }
}

std::vector<std::string> Dim::symbol_names() const {
  std::set<std::string> names;
  collect_symbols(*this, names);
  return {names.begin(), names.end()};
}

// ---- printing ----

static std::string atom_str(const DimAtom& a, bool alone) {
  switch (a.kind) {
    case DimAtom::Kind::Symbol: return a.name;
    case DimAtom::Kind::FloorDiv: {
      const Dim& x = a.args[0];
      std::string s = (x.as_symbol() ? x.str() : "(" + x.str() + ")") + " // " + std::to_string(a.divisor);
      return alone ? s : "(" + s + ")";  // `2*N // 2` would read as (2*N) // 2
    }
    case DimAtom::Kind::Min:
    case DimAtom::Kind::Max: {
      // Constants last: max(N - 2, 0) reads better than max(0, N - 2).
      std::string s = a.kind == DimAtom::Kind::Min ? "min(" : "max(";
      bool first = true;
      for (bool constants : {false, true})
        for (const Dim& arg : a.args)
          if (arg.is_constant() == constants) {
            s += (first ? "" : ", ") + arg.str();
            first = false;
          }
      return s + ")";
    }
  }
  return "?";
}

static std::string term_str(const DimTerm& t) {
  std::string magnitude = std::to_string(t.coef);
  if (magnitude[0] == '-') magnitude.erase(0, 1);
  if (t.atoms.empty()) return magnitude;
  std::string s = magnitude == "1" ? "" : magnitude + "*";
  bool alone = s.empty() && t.atoms.size() == 1;
  for (size_t i = 0; i < t.atoms.size(); ++i) s += (i ? "*" : "") + atom_str(t.atoms[i], alone);
  return s;
}

std::string Dim::str() const {
  if (terms.empty()) return "0";
  // Positive terms first and constants after the others: `N - 2`, `3 - N`, `-N - 2`.
  std::string s;
  for (bool negative : {false, true})
    for (bool constants : {false, true})
      for (const DimTerm& t : terms)
        if ((t.coef < 0) == negative && t.atoms.empty() == constants)
          s += (s.empty() ? (negative ? "-" : "") : (negative ? " - " : " + ")) + term_str(t);
  return s;
}

// ---- arithmetic ----

Dim operator+(const Dim& a, const Dim& b) {
  std::vector<DimTerm> terms = a.terms;
  terms.insert(terms.end(), b.terms.begin(), b.terms.end());
  return from_terms(std::move(terms));
}

Dim operator-(const Dim& a, const Dim& b) { return a + Dim(-1) * b; }

Dim operator*(const Dim& a, const Dim& b) {
  std::vector<DimTerm> terms;
  for (const DimTerm& x : a.terms)
    for (const DimTerm& y : b.terms) {
      DimTerm t;
      if (__builtin_mul_overflow(x.coef, y.coef, &t.coef))
        throw Error("dim " + a.str() + " * " + b.str() + " overflows 64 bits");
      std::merge(x.atoms.begin(), x.atoms.end(), y.atoms.begin(), y.atoms.end(), std::back_inserter(t.atoms),
                 atom_less);
      terms.push_back(std::move(t));
    }
  return from_terms(std::move(terms));
}

static int64_t floor_div_int(int64_t a, int64_t c) { return a / c - (a % c != 0 && a < 0); }

Dim floor_div(const Dim& a, int64_t divisor) {
  if (divisor <= 0) throw Error("dim " + a.str() + " // " + std::to_string(divisor) + ": the divisor must be positive");
  if (divisor == 1) return a;
  // a = divisor*whole + rest with every coefficient of rest in [0, divisor): floor(a / divisor) is
  // whole + floor(rest / divisor), and that split is unique, so the result is canonical.
  std::vector<DimTerm> whole, rest;
  for (const DimTerm& t : a.terms) {
    int64_t q = floor_div_int(t.coef, divisor), r = t.coef - q * divisor;
    if (q) whole.push_back({q, t.atoms});
    if (r) rest.push_back({r, t.atoms});
  }
  Dim result = from_terms(std::move(whole));
  Dim remainder = from_terms(std::move(rest));
  if (remainder.is_constant()) return result;  // 0 <= rest < divisor
  const DimTerm& only = remainder.terms[0];
  if (remainder.terms.size() == 1 && only.coef == 1 && only.atoms.size() == 1 &&
      only.atoms[0].kind == DimAtom::Kind::FloorDiv) {
    // floor(floor(x / d) / c) is floor(x / (d*c)).
    int64_t combined = 0;
    if (!__builtin_mul_overflow(only.atoms[0].divisor, divisor, &combined))
      return result + floor_div(only.atoms[0].args[0], combined);
  }
  DimAtom atom;
  atom.kind = DimAtom::Kind::FloorDiv;
  atom.args = {std::move(remainder)};
  atom.divisor = divisor;
  return result + from_atom(std::move(atom));
}

Dim ceil_div(const Dim& a, int64_t divisor) {
  if (divisor <= 0) throw Error("ceildiv(" + a.str() + ", " + std::to_string(divisor) + "): the divisor must be positive");
  return floor_div(a + Dim(divisor - 1), divisor);
}

static Dim min_max(DimAtom::Kind kind, const Dim& a, const Dim& b) {
  std::vector<Dim> args;
  for (const Dim* d : {&a, &b}) {
    const auto& t = d->terms;
    if (t.size() == 1 && t[0].coef == 1 && t[0].atoms.size() == 1 && t[0].atoms[0].kind == kind)
      args.insert(args.end(), t[0].atoms[0].args.begin(), t[0].atoms[0].args.end());  // min(min(x, y), z)
    else
      args.push_back(*d);
  }
  // An argument that differs from another by a constant is decided now: min(N, N + 1) is N.
  std::vector<Dim> kept;
  for (Dim& x : args) {
    bool dominated = false;
    for (size_t i = 0; i < kept.size();) {
      std::optional<int64_t> diff = (x - kept[i]).constant();
      bool x_wins = diff && (kind == DimAtom::Kind::Min ? *diff < 0 : *diff > 0);
      if (diff && !x_wins) {
        dominated = true;
        break;
      }
      if (x_wins) kept.erase(kept.begin() + static_cast<std::ptrdiff_t>(i));
      else ++i;
    }
    if (!dominated) kept.push_back(std::move(x));
  }
  if (kept.size() == 1) return kept[0];
  std::sort(kept.begin(), kept.end(), [](const Dim& x, const Dim& y) { return compare_dims(x, y) < 0; });
  DimAtom atom;
  atom.kind = kind;
  atom.args = std::move(kept);
  return from_atom(std::move(atom));
}

Dim dim_min(const Dim& a, const Dim& b) { return min_max(DimAtom::Kind::Min, a, b); }
Dim dim_max(const Dim& a, const Dim& b) { return min_max(DimAtom::Kind::Max, a, b); }

std::optional<Dim> exact_divide(const Dim& a, const Dim& b) {
  if (b.terms.size() != 1) {
    if (!b.terms.empty() && a == b) return Dim(1);
    return std::nullopt;
  }
  const DimTerm& divisor = b.terms[0];
  std::vector<DimTerm> terms;
  for (const DimTerm& t : a.terms) {
    if (t.coef % divisor.coef != 0) return std::nullopt;
    DimTerm q{t.coef / divisor.coef, t.atoms};
    for (const DimAtom& atom : divisor.atoms) {
      auto it = std::find(q.atoms.begin(), q.atoms.end(), atom);
      if (it == q.atoms.end()) return std::nullopt;
      q.atoms.erase(it);
    }
    terms.push_back(std::move(q));
  }
  return from_terms(std::move(terms));
}

// ---- parsing ----

namespace {

/// Recursive descent over the grammar of Dim::str():
///   sum := term (('+' | '-') term)* ; term := factor ('*' factor | '//' factor)* ;
///   factor := integer | symbol | ('min' | 'max') '(' sum (',' sum)+ ')' | '(' sum ')' | '-' factor
class DimParser {
 public:
  explicit DimParser(std::string_view text) : text_(text) {}

  Dim parse() {
    Dim d = sum();
    skip_spaces();
    if (pos_ != text_.size()) throw fail("unexpected '" + std::string(1, text_[pos_]) + "'");
    if (auto c = d.constant(); c && *c < 0) throw fail("a dim cannot be negative");
    return d;
  }

 private:
  static constexpr int kMaxDepth = 64;  // a hostile bundle must not overflow the stack

  Error fail(const std::string& why) const {
    return Error("'" + std::string(text_) + "' is not a dim (" + why + "; expected e.g. 4, N or 2*N*M)");
  }
  void skip_spaces() {
    while (pos_ < text_.size() && text_[pos_] == ' ') ++pos_;
  }
  bool at(char c) {
    skip_spaces();
    return pos_ < text_.size() && text_[pos_] == c;
  }

  Dim sum() {
    Dim d = term();
    while (at('+') || at('-')) {
      bool minus = text_[pos_++] == '-';
      Dim t = term();
      d = minus ? d - t : d + t;
    }
    return d;
  }

  Dim term() {
    std::vector<Dim> factors{factor()};
    while (at('*') || at('/')) {
      if (text_[pos_] == '*') {
        ++pos_;
        factors.push_back(factor());
        continue;
      }
      if (pos_ + 1 >= text_.size() || text_[pos_ + 1] != '/') throw fail("unexpected '/' (division is '//')");
      pos_ += 2;
      std::optional<int64_t> divisor = factor().constant();
      if (!divisor || *divisor <= 0) throw fail("the divisor of '//' must be a positive constant");
      Dim dividend = product(factors);
      factors = {floor_div(dividend, *divisor)};
    }
    return product(factors);
  }

  /// The product of the factors; monomials are combined in one go (sorted once): a long product in
  /// a hostile bundle must not take quadratic time.
  Dim product(const std::vector<Dim>& factors) {
    bool monomials = std::all_of(factors.begin(), factors.end(), [](const Dim& f) { return f.terms.size() <= 1; });
    if (!monomials) {
      Dim d = 1;
      for (const Dim& f : factors) d = d * f;
      return d;
    }
    DimTerm t{1, {}};
    for (const Dim& f : factors) {
      if (f.terms.empty()) return Dim(0);  // 0 * N is 0 whatever N is
      if (__builtin_mul_overflow(t.coef, f.terms[0].coef, &t.coef)) throw fail("the product overflows 64 bits");
      t.atoms.insert(t.atoms.end(), f.terms[0].atoms.begin(), f.terms[0].atoms.end());
    }
    std::sort(t.atoms.begin(), t.atoms.end(), atom_less);
    Dim d;
    d.terms.push_back(std::move(t));
    return d;
  }

  Dim factor() {
    skip_spaces();
    if (pos_ == text_.size()) throw fail("a factor is missing");
    if (++depth_ > kMaxDepth) throw fail("nested too deeply");
    Dim d = factor_at();
    --depth_;
    return d;
  }

  Dim factor_at() {
    char c = text_[pos_];
    size_t start = pos_;
    if (std::isdigit(static_cast<unsigned char>(c))) {
      int64_t value = 0;
      for (; pos_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[pos_])); ++pos_)
        if (__builtin_mul_overflow(value, 10, &value) || __builtin_add_overflow(value, text_[pos_] - '0', &value))
          throw fail("the number overflows 64 bits");
      return value;
    }
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      while (pos_ < text_.size() && (std::isalnum(static_cast<unsigned char>(text_[pos_])) || text_[pos_] == '_')) ++pos_;
      std::string name(text_.substr(start, pos_ - start));
      if ((name == "min" || name == "max") && at('(')) {
        ++pos_;
        Dim d = sum();
        int count = 1;
        while (at(',')) {
          ++pos_;
          Dim next = sum();
          d = name == "min" ? dim_min(d, next) : dim_max(d, next);
          ++count;
        }
        if (!at(')')) throw fail(pos_ < text_.size() ? "unexpected '" + std::string(1, text_[pos_]) + "'" : "')' is missing");
        ++pos_;
        if (count < 2) throw fail(name + " needs two or more arguments");
        return d;
      }
      return Dim::symbol(std::move(name));
    }
    if (c == '(') {
      ++pos_;
      Dim d = sum();
      if (!at(')')) throw fail(pos_ < text_.size() ? "unexpected '" + std::string(1, text_[pos_]) + "'" : "')' is missing");
      ++pos_;
      return d;
    }
    if (c == '-') {
      ++pos_;
      return Dim(-1) * factor();
    }
    throw fail("unexpected '" + std::string(1, c) + "'");
  }

  std::string_view text_;
  size_t pos_ = 0;
  int depth_ = 0;
};

}  // namespace

Dim parse_dim(std::string_view text) {
  try {
    return DimParser(text).parse();
  } catch (const Error& e) {
    // Arithmetic errors (an overflowing sum) name the text too.
    if (e.message().find("is not a dim") != std::string::npos) throw;
    throw Error("'" + std::string(text) + "' is not a dim (" + e.message() + ")");
  }
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

static int64_t evaluate_atom(const DimAtom& a, const Dim& whole, const SymbolBindings& bindings) {
  switch (a.kind) {
    case DimAtom::Kind::Symbol: {
      auto it = bindings.find(a.name);
      if (it == bindings.end()) throw Error("symbol '" + a.name + "' is not bound to a size");
      return it->second;
    }
    case DimAtom::Kind::FloorDiv: return floor_div_int(evaluate(a.args[0], bindings), a.divisor);
    case DimAtom::Kind::Min:
    case DimAtom::Kind::Max: {
      int64_t v = evaluate(a.args[0], bindings);
      for (size_t i = 1; i < a.args.size(); ++i) {
        int64_t x = evaluate(a.args[i], bindings);
        v = a.kind == DimAtom::Kind::Min ? std::min(v, x) : std::max(v, x);
      }
      return v;
    }
  }
  throw Error("dim " + whole.str() + " has an unknown node");
}

int64_t evaluate(const Dim& d, const SymbolBindings& bindings) {
  auto overflow = [&] {
    std::string values;
    for (const std::string& s : d.symbol_names()) {
      auto it = bindings.find(s);
      if (it != bindings.end()) values += (values.empty() ? "" : ", ") + s + " = " + std::to_string(it->second);
    }
    return Error("dim " + d.str() + " overflows 64 bits with " + values);
  };
  int64_t total = 0;
  for (const DimTerm& t : d.terms) {
    int64_t v = t.coef;
    for (const DimAtom& a : t.atoms)
      if (__builtin_mul_overflow(v, evaluate_atom(a, d, bindings), &v)) throw overflow();
    if (__builtin_add_overflow(total, v, &total)) throw overflow();
  }
  return total;
}

ConcreteShape evaluate(const Shape& s, const SymbolBindings& bindings) {
  ConcreteShape out;
  out.reserve(s.size());
  for (const Dim& d : s) {
    out.push_back(evaluate(d, bindings));
    // `N - 4` with N = 3: no array has a negative size.
    if (out.back() < 0) {
      std::string values;
      for (const std::string& name : d.symbol_names())
        values += (values.empty() ? "" : ", ") + name + " = " + std::to_string(bindings.at(name));
      throw Error("dim " + d.str() + " of shape " + shape_str(s) + " is negative (" + std::to_string(out.back()) +
                  ") with " + values);
    }
  }
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
    std::optional<std::string> symbol = d.as_symbol();
    if (std::optional<int64_t> c = d.constant()) {
      if (*c != actual[i]) throw mismatch();
    } else if (symbol) {
      const std::string& sym = *symbol;
      auto [it, inserted] = bindings.emplace(sym, actual[i]);
      if (!inserted && it->second != actual[i])
        throw Error("symbol '" + sym + "' is bound to " + std::to_string(it->second) +
                    " but " + what + " gives it size " + std::to_string(actual[i]) + " (shape " +
                    shape_str(actual) + ", declared " + shape_str(declared) + ")");
    }
  }
  // Compound dims (2*N, N*M, N - 2) are checked once every plain symbol is bound.
  for (size_t i = 0; i < declared.size(); ++i) {
    const Dim& d = declared[i];
    if (d.is_constant() || d.as_symbol()) continue;
    std::vector<std::string> names = d.symbol_names();
    bool all_bound = std::all_of(names.begin(), names.end(),
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
