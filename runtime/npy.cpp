#include "runtime/npy.h"

#include <bit>
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>

#include "ir/error.h"

namespace fuse::runtime {

// Element bytes are copied as they are: .npy data is little-endian and so is every host we
// target.
static_assert(std::endian::native == std::endian::little);

using ir::DType;
using ir::Error;
using ir::HostArray;

namespace {

constexpr std::string_view kMagic = "\x93NUMPY";

struct NpyDescr {
  std::string_view descr;
  DType dtype;
};
constexpr NpyDescr kDescrs[] = {
    {"|b1", DType::Bool}, {"<i4", DType::I32}, {"<i8", DType::I64},
    {"<f4", DType::F32},  {"<f8", DType::F64},
};

std::string_view descr_of(DType t) {
  for (const NpyDescr& d : kDescrs)
    if (d.dtype == t) return d.descr;
  throw Error("no .npy descr for dtype " + std::string(ir::dtype_name(t)));
}

struct NpyHeader {
  DType dtype = DType::F32;
  bool fortran_order = false;
  ir::ConcreteShape shape;
};

/// Parses the header: a Python dict literal with exactly the keys 'descr', 'fortran_order' and
/// 'shape', e.g. "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }".
class HeaderParser {
 public:
  HeaderParser(std::string_view text, const std::string& what) : text_(text), what_(what) {}

  NpyHeader parse() {
    NpyHeader h;
    bool seen_descr = false, seen_order = false, seen_shape = false;
    expect('{');
    while (!peek_is('}')) {
      std::string key = string_literal("a key");
      expect(':');
      if (key == "descr" && !seen_descr) {
        h.dtype = dtype_of_descr(string_literal("the 'descr' value"));
        seen_descr = true;
      } else if (key == "fortran_order" && !seen_order) {
        h.fortran_order = boolean();
        seen_order = true;
      } else if (key == "shape" && !seen_shape) {
        h.shape = shape_tuple();
        seen_shape = true;
      } else {
        bool known = key == "descr" || key == "fortran_order" || key == "shape";
        fail((known ? "duplicate key '" : "unknown key '") + key + "'");
      }
      if (!peek_is('}')) expect(',');
    }
    expect('}');
    skip_space();
    if (pos_ != text_.size()) fail("unexpected text after the header dict");
    if (!seen_descr || !seen_order || !seen_shape)
      fail("the header dict lacks '" +
           std::string(!seen_descr ? "descr" : !seen_order ? "fortran_order" : "shape") + "'");
    return h;
  }

 private:
  [[noreturn]] void fail(const std::string& problem) const {
    constexpr size_t kShown = 200;  // a v2/v3 header may be huge: quote only its start
    std::string header(text_.substr(0, kShown));
    throw Error(what_ + ": malformed .npy header: " + problem + " (header: " + header +
                (text_.size() > kShown ? "..." : "") + ")");
  }

  void skip_space() {
    while (pos_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[pos_]))) ++pos_;
  }
  bool peek_is(char c) {
    skip_space();
    return pos_ < text_.size() && text_[pos_] == c;
  }
  void expect(char c) {
    if (!peek_is(c)) fail(std::string("expected '") + c + "'");
    ++pos_;
  }

  std::string string_literal(const std::string& role) {
    skip_space();
    char quote = pos_ < text_.size() ? text_[pos_] : '\0';
    if (quote != '\'' && quote != '"') fail("expected a quoted string for " + role);
    size_t end = text_.find(quote, pos_ + 1);
    if (end == std::string_view::npos) fail("unterminated string");
    std::string s(text_.substr(pos_ + 1, end - pos_ - 1));
    pos_ = end + 1;
    return s;
  }

  bool boolean() {
    skip_space();
    for (auto [word, value] : {std::pair{"True", true}, std::pair{"False", false}}) {
      if (text_.substr(pos_).starts_with(word)) {
        pos_ += std::strlen(word);
        return value;
      }
    }
    fail("expected True or False for 'fortran_order'");
  }

  ir::ConcreteShape shape_tuple() {
    ir::ConcreteShape shape;
    expect('(');
    while (!peek_is(')')) {
      if (peek_is('-')) fail("negative dimension in 'shape'");
      int64_t dim = 0;
      auto [end, ec] = std::from_chars(text_.data() + pos_, text_.data() + text_.size(), dim);
      if (ec == std::errc::result_out_of_range) fail("dimension too large in 'shape'");
      if (ec != std::errc()) fail("expected an integer dimension in 'shape'");
      pos_ = end - text_.data();
      if (peek_is('L')) ++pos_;  // Python 2 long literals, as old NumPy wrote them
      shape.push_back(dim);
      if (!peek_is(')')) expect(',');
    }
    expect(')');
    return shape;
  }

  DType dtype_of_descr(const std::string& descr) const {
    for (const NpyDescr& d : kDescrs)
      if (d.descr == descr) return d.dtype;
    if (descr.size() > 1 && descr[0] == '>')
      fail("big-endian data ('" + descr + "') is not supported; convert it with "
           "a.astype(a.dtype.newbyteorder('<'))");
    fail("unsupported dtype '" + descr + "' (supported: |b1 <i4 <i8 <f4 <f8)");
  }

  std::string_view text_;
  const std::string& what_;
  size_t pos_ = 0;
};

uint64_t read_le(std::string_view bytes, size_t offset, size_t width) {
  uint64_t v = 0;
  for (size_t i = 0; i < width; ++i)
    v |= static_cast<uint64_t>(static_cast<unsigned char>(bytes[offset + i])) << (8 * i);
  return v;
}

/// Copies Fortran-ordered elements into row-major order: walks the source in its own order
/// with an odometer over the dims, first dim fastest.
void fortran_to_row_major(const unsigned char* src, HostArray& out) {
  size_t elem = ir::dtype_size(out.dtype);
  std::vector<int64_t> strides = ir::row_major_strides(out.shape);
  std::vector<int64_t> index(out.shape.size(), 0);
  int64_t dst = 0;
  for (int64_t f = 0; f < out.size(); ++f) {
    std::memcpy(out.bytes.data() + dst * elem, src + f * elem, elem);
    for (size_t d = 0; d < index.size(); ++d) {
      dst += strides[d];
      if (++index[d] < out.shape[d]) break;
      dst -= strides[d] * index[d];
      index[d] = 0;
    }
  }
}

/// A shape as Python writes a tuple: "()", "(3,)", "(3, 4)".
std::string python_tuple(const ir::ConcreteShape& shape) {
  std::string t;
  for (int64_t d : shape) t += (t.empty() ? "" : ", ") + std::to_string(d);
  return "(" + t + (shape.size() == 1 ? ",)" : ")");
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("cannot read '" + path + "': " + std::strerror(errno));
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) throw Error("cannot read '" + path + "': " + std::strerror(errno));
  return bytes;
}

}  // namespace

HostArray parse_npy(std::string_view bytes, const std::string& what) {
  if (!bytes.starts_with(kMagic)) throw Error(what + ": not a .npy file (no \\x93NUMPY magic)");
  if (bytes.size() < 10) throw Error(what + ": truncated .npy header");
  int major = static_cast<unsigned char>(bytes[6]);
  int minor = static_cast<unsigned char>(bytes[7]);
  if (major < 1 || major > 3 || minor != 0)
    throw Error(what + ": unsupported .npy format version " + std::to_string(major) + "." +
                std::to_string(minor) + " (supported: 1.0, 2.0, 3.0)");
  size_t len_width = major == 1 ? 2 : 4;
  size_t header_start = 8 + len_width;
  if (bytes.size() < header_start) throw Error(what + ": truncated .npy header");
  uint64_t header_len = read_le(bytes, 8, len_width);
  if (header_len > bytes.size() - header_start)
    throw Error(what + ": truncated .npy header: it claims " + std::to_string(header_len) +
                " bytes but the file has " + std::to_string(bytes.size() - header_start) + " left");
  NpyHeader h = HeaderParser(bytes.substr(header_start, header_len), what).parse();

  // The product of the nonzero dims must fit int64 even when a 0 dim empties the array: strides
  // and sizes are computed over all dims.
  int64_t nonzero_count = 1;
  bool empty = false;
  for (int64_t d : h.shape) {
    empty |= d == 0;
    if (d != 0 && __builtin_mul_overflow(nonzero_count, d, &nonzero_count))
      throw Error(what + ": shape " + ir::shape_str(h.shape) + " has too many elements");
  }
  int64_t data_bytes = 0;
  if (__builtin_mul_overflow(empty ? 0 : nonzero_count, static_cast<int64_t>(ir::dtype_size(h.dtype)),
                             &data_bytes))
    throw Error(what + ": shape " + ir::shape_str(h.shape) + " has too many elements");
  std::string_view data = bytes.substr(header_start + header_len);
  if (data.size() != static_cast<uint64_t>(data_bytes))
    throw Error(what + ": " + (data.size() < static_cast<uint64_t>(data_bytes) ? "truncated" : "unexpected extra") +
                " data: shape " + ir::shape_str(h.shape) + " of " +
                std::string(ir::dtype_name(h.dtype)) + " needs " + std::to_string(data_bytes) +
                " bytes, the file has " + std::to_string(data.size()));

  HostArray out(h.dtype, h.shape);
  const auto* src = reinterpret_cast<const unsigned char*>(data.data());
  if (h.fortran_order && out.rank() > 1) fortran_to_row_major(src, out);
  else if (data_bytes > 0) std::memcpy(out.bytes.data(), src, data_bytes);
  if (out.dtype == DType::Bool)
    for (uint8_t& b : out.bytes) b = b != 0;  // NumPy may store any nonzero byte as true
  return out;
}

HostArray read_npy(const std::string& path) { return parse_npy(read_file(path), path); }

std::string serialize_npy(const HostArray& array) {
  std::string header = "{'descr': '" + std::string(descr_of(array.dtype)) +
                       "', 'fortran_order': False, 'shape': " + python_tuple(array.shape) + ", }";
  // Version 1.0 has 2 bytes for the header length; a longer header (a rank in the thousands) is
  // written as 2.0, with 4, as NumPy does. Padding and the '\n' add at most 64 bytes.
  size_t len_width = header.size() + 64 > 0xffff ? 4 : 2;
  size_t unpadded = kMagic.size() + 2 + len_width + header.size() + 1;  // + version, length, '\n'
  header.append((64 - unpadded % 64) % 64, ' ');
  header += '\n';
  std::string out(kMagic);
  out += static_cast<char>(len_width == 2 ? 1 : 2);
  out += '\x00';
  for (size_t i = 0; i < len_width; ++i) out += static_cast<char>((header.size() >> (8 * i)) & 0xff);
  out += header;
  out.append(reinterpret_cast<const char*>(array.bytes.data()), array.bytes.size());
  return out;
}

void write_npy(const std::string& path, const HostArray& array) {
  std::string bytes = serialize_npy(array);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw Error("cannot write '" + path + "': " + std::strerror(errno));
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) throw Error("cannot write '" + path + "': " + std::strerror(errno));
}

// ---- array_repr: a port of numpy/core/arrayprint.py (default options, NumPy >= 1.14) ----

std::string_view numpy_dtype_name(DType t) {
  switch (t) {
    case DType::Bool: return "bool";
    case DType::I32: return "int32";
    case DType::I64: return "int64";
    case DType::F32: return "float32";
    case DType::F64: return "float64";
  }
  return "?";
}

namespace {

constexpr int kLineWidth = 75;
constexpr int64_t kThreshold = 1000;  // more elements than this are summarized
constexpr int64_t kEdgeItems = 3;
constexpr int kPrecision = 8;

/// The digits of a float as NumPy's dragon4 prints them in unique mode with at most
/// kPrecision fractional digits (positional) or mantissa digits (scientific).
std::string float_digits(double v, DType t, std::chars_format fmt) {
  char buf[400];
  auto shortest = [&](auto x) { return std::to_chars(buf, buf + sizeof buf, x, fmt).ptr; };
  auto rounded = [&](auto x) { return std::to_chars(buf, buf + sizeof buf, x, fmt, kPrecision).ptr; };
  bool f32 = t == DType::F32;
  float vf = static_cast<float>(v);
  std::string s(buf, f32 ? shortest(vf) : shortest(v));
  size_t dot = s.find('.'), end = s.find('e');
  if (end == std::string::npos) end = s.size();
  if (dot != std::string::npos && end - dot - 1 > static_cast<size_t>(kPrecision)) {
    s.assign(buf, f32 ? rounded(vf) : rounded(v));
    end = s.find('e');
    if (end == std::string::npos) end = s.size();
    size_t last = s.find_last_not_of('0', end - 1);
    s.erase(last + 1, end - last - 1);
  }
  return s;
}

/// Splits "12.5e+03" into "12", "5" and "+03" (missing parts empty).
struct FloatParts {
  std::string int_part, frac, exp;
};
FloatParts split_float(const std::string& s) {
  FloatParts p;
  size_t e = s.find('e');
  std::string mantissa = s.substr(0, e);
  if (e != std::string::npos) p.exp = s.substr(e + 1);
  size_t dot = mantissa.find('.');
  p.int_part = mantissa.substr(0, dot);
  if (dot != std::string::npos) p.frac = mantissa.substr(dot + 1);
  return p;
}

std::string pad_left(std::string s, size_t width) {
  return s.size() < width ? std::string(width - s.size(), ' ') + s : s;
}

/// Formats one element; the widths are fitted to the elements that will be shown, as NumPy's
/// FloatingFormat, IntegerFormat and BoolFormat do.
class ElementFormat {
 public:
  ElementFormat(const HostArray& a, const std::vector<int64_t>& shown) : a_(a) {
    if (a.dtype == DType::Bool) return;
    if (!ir::is_float(a.dtype)) {
      for (int64_t i : shown) int_width_ = std::max(int_width_, std::to_string(a.get_i64(i)).size());
      return;
    }
    std::vector<double> finite;
    bool has_nan = false, has_neg_inf = false, has_inf = false;
    for (int64_t i : shown) {
      double v = a.get_f64(i);
      if (std::isfinite(v)) finite.push_back(v);
      has_nan |= std::isnan(v);
      has_inf |= std::isinf(v);
      has_neg_inf |= std::isinf(v) && v < 0;
    }
    double max_abs = 0, min_abs = INFINITY;
    for (double v : finite) {
      if (v == 0) continue;
      max_abs = std::max(max_abs, std::abs(v));
      min_abs = std::min(min_abs, std::abs(v));
    }
    exp_format_ = max_abs > 0 && (max_abs >= 1e8 || min_abs < 1e-4 || max_abs / min_abs > 1e3);
    for (double v : finite) {
      FloatParts p = split_float(float_digits(
          v, a.dtype, exp_format_ ? std::chars_format::scientific : std::chars_format::fixed));
      pad_left_ = std::max(pad_left_, p.int_part.size());
      frac_width_ = std::max(frac_width_, p.frac.size());
      exp_width_ = std::max(exp_width_, p.exp.empty() ? 0 : p.exp.size() - 1);
    }
    pad_right_ = exp_format_ ? exp_width_ + 2 + frac_width_ : frac_width_;
    if (has_nan || has_inf) {
      size_t offset = pad_right_ + 1;  // the decimal point
      size_t inf_len = 3 + (has_neg_inf ? 1 : 0);
      for (size_t len : {has_nan ? size_t{3} : 0, has_inf ? inf_len : 0})
        if (len > offset) pad_left_ = std::max(pad_left_, len - offset);
    }
  }

  std::string operator()(int64_t i) const {
    if (a_.dtype == DType::Bool)
      return a_.get_i64(i) ? (a_.rank() > 0 ? " True" : "True") : "False";
    if (!ir::is_float(a_.dtype)) return pad_left(std::to_string(a_.get_i64(i)), int_width_);
    double v = a_.get_f64(i);
    if (!std::isfinite(v))
      return pad_left(std::isnan(v) ? "nan" : v < 0 ? "-inf" : "inf", pad_left_ + pad_right_ + 1);
    FloatParts p = split_float(float_digits(
        v, a_.dtype, exp_format_ ? std::chars_format::scientific : std::chars_format::fixed));
    std::string s = pad_left(p.int_part, pad_left_) + "." + p.frac;
    if (!exp_format_) return s + std::string(frac_width_ - p.frac.size(), ' ');
    s += std::string(frac_width_ - p.frac.size(), '0') + "e" + p.exp[0];
    return s + std::string(exp_width_ + 1 - p.exp.size(), '0') + p.exp.substr(1);
  }

 private:
  const HostArray& a_;
  size_t int_width_ = 0;
  bool exp_format_ = false;
  size_t pad_left_ = 0, pad_right_ = 0, frac_width_ = 0, exp_width_ = 0;
};

/// Which indices of each axis are printed; -1 stands for the "..." of a summarized axis.
std::vector<std::vector<int64_t>> shown_items(const ir::ConcreteShape& shape, bool summarize) {
  std::vector<std::vector<int64_t>> items(shape.size());
  for (size_t d = 0; d < shape.size(); ++d) {
    for (int64_t i = 0; i < shape[d]; ++i) {
      bool skipped = summarize && i >= kEdgeItems && i < shape[d] - kEdgeItems;
      if (!skipped) items[d].push_back(i);
      else if (i == kEdgeItems) items[d].push_back(-1);
    }
  }
  return items;
}

struct ReprContext {
  const HostArray& array;
  std::vector<std::vector<int64_t>> items;
  std::vector<int64_t> strides;
};

void collect_shown(const ReprContext& c, size_t axis, int64_t offset, std::vector<int64_t>& out) {
  if (axis == c.items.size()) {
    out.push_back(offset);
    return;
  }
  for (int64_t i : c.items[axis])
    if (i >= 0) collect_shown(c, axis + 1, offset + i * c.strides[axis], out);
}

/// NumPy's _extendLine: wraps before `word` when the line would pass `width`, unless wrapping
/// cannot help because the line holds only the indent.
void extend_line(std::string& s, std::string& line, const std::string& word, size_t width,
                 const std::string& indent) {
  if (line.size() + word.size() > width && line.size() > indent.size()) {
    s += line.substr(0, line.find_last_not_of(' ') + 1) + "\n";
    line = indent;
  }
  line += word;
}

/// NumPy's _formatArray recursion: rows wrapped to `width`, one newline between rows of a
/// matrix and one more per further dim.
std::string format_axis(const ReprContext& c, const ElementFormat& fmt, size_t axis,
                        int64_t offset, const std::string& indent, size_t width) {
  if (axis == c.items.size()) return fmt(offset);
  const std::vector<int64_t>& items = c.items[axis];
  auto word = [&](size_t k) {
    return items[k] < 0 ? std::string("...")
                        : format_axis(c, fmt, axis + 1, offset + items[k] * c.strides[axis],
                                      indent + " ", width - 1);
  };
  std::string s;
  if (axis + 1 == c.items.size()) {
    std::string line = indent;
    for (size_t k = 0; k < items.size(); ++k) {
      extend_line(s, line, word(k), width - 1, indent);
      if (k + 1 < items.size()) line += ", ";
    }
    s += line;
  } else {
    std::string separator = "," + std::string(c.items.size() - axis - 1, '\n');
    for (size_t k = 0; k < items.size(); ++k)
      s += indent + word(k) + (k + 1 < items.size() ? separator : "");
  }
  return "[" + s.substr(indent.size()) + "]";
}

}  // namespace

std::string array_repr(const HostArray& array, std::string_view label) {
  std::string prefix = std::string(label) + "array(";
  std::string dtype = "dtype=" + std::string(numpy_dtype_name(array.dtype)) + ")";
  if (array.size() == 0) {
    std::string shape = array.rank() == 1 ? "" : "shape=" + python_tuple(array.shape) + ", ";
    return prefix + "[], " + shape + dtype;
  }
  bool default_dtype = array.dtype == DType::F64 || array.dtype == DType::I64 ||
                       array.dtype == DType::Bool;
  std::string suffix = default_dtype ? ")" : ",";
  ReprContext c{array, shown_items(array.shape, array.size() > kThreshold),
                ir::row_major_strides(array.shape)};
  std::vector<int64_t> shown;
  collect_shown(c, 0, 0, shown);
  ElementFormat fmt(array, shown);
  std::string indent = " " + std::string(prefix.size(), ' ');
  std::string text =
      prefix + format_axis(c, fmt, 0, 0, indent, kLineWidth - suffix.size()) + suffix;
  if (default_dtype) return text;
  size_t last_line = text.size() - (text.rfind('\n') + 1);
  bool wrap = last_line + dtype.size() + 1 > static_cast<size_t>(kLineWidth);
  return text + (wrap ? "\n" + std::string(prefix.size(), ' ') : " ") + dtype;
}

}  // namespace fuse::runtime
