#include "runtime/json.h"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <set>

#include "ir/error.h"

namespace fuse::runtime {

using ir::Error;

Json Json::array(std::vector<Json> items) {
  Json j;
  j.kind_ = Kind::Array;
  j.items_ = std::move(items);
  return j;
}

Json Json::object() {
  Json j;
  j.kind_ = Kind::Object;
  return j;
}

Json& Json::set(const std::string& key, Json value) {
  for (auto& [k, v] : members_)
    if (k == key) return v = std::move(value);
  members_.emplace_back(key, std::move(value));
  return members_.back().second;
}

Json& Json::push(Json value) {
  items_.push_back(std::move(value));
  return items_.back();
}

namespace {

const char* kind_name(Json::Kind k) {
  switch (k) {
    case Json::Kind::Null: return "null";
    case Json::Kind::Bool: return "a boolean";
    case Json::Kind::Number: return "a number";
    case Json::Kind::String: return "a string";
    case Json::Kind::Array: return "an array";
    case Json::Kind::Object: return "an object";
  }
  return "?";
}

void quote(std::string& out, const std::string& s) {
  out += '"';
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += c;
        }
    }
  }
  out += '"';
}

}  // namespace

const Json& Json::at(const std::string& key, const std::string& path) const {
  if (kind_ != Kind::Object) throw Error(path + " is " + kind_name(kind_) + ", not an object");
  for (const auto& [k, v] : members_)
    if (k == key) return v;
  throw Error(path + " has no \"" + key + "\"");
}

bool Json::has(const std::string& key) const {
  return std::any_of(members_.begin(), members_.end(), [&](const auto& m) { return m.first == key; });
}

const std::vector<Json>& Json::items(const std::string& path) const {
  if (kind_ != Kind::Array) throw Error(path + " is " + kind_name(kind_) + ", not an array");
  return items_;
}

int64_t Json::as_int(const std::string& path) const {
  int64_t v = 0;
  if (kind_ != Kind::Number) throw Error(path + " is " + kind_name(kind_) + ", not an integer");
  auto [end, ec] = std::from_chars(text_.data(), text_.data() + text_.size(), v);
  if (ec != std::errc() || end != text_.data() + text_.size())
    throw Error(path + " is " + text_ + ", not a 64-bit integer");
  return v;
}

const std::string& Json::as_string(const std::string& path) const {
  if (kind_ != Kind::String) throw Error(path + " is " + kind_name(kind_) + ", not a string");
  return text_;
}

std::string Json::dump() const {
  std::string out;
  dump_to(out, 0);
  out += '\n';
  return out;
}

void Json::dump_to(std::string& out, int indent) const {
  std::string pad(indent + 2, ' ');
  switch (kind_) {
    case Kind::Null: out += "null"; return;
    case Kind::Bool: out += bool_ ? "true" : "false"; return;
    case Kind::Number: out += text_; return;
    case Kind::String: quote(out, text_); return;
    case Kind::Array: {
      bool flat = std::all_of(items_.begin(), items_.end(),
                              [](const Json& j) { return j.kind_ != Kind::Array && j.kind_ != Kind::Object; });
      out += '[';
      for (size_t i = 0; i < items_.size(); ++i) {
        out += i ? (flat ? ", " : ",\n" + pad) : (flat ? "" : "\n" + pad);
        items_[i].dump_to(out, indent + 2);
      }
      if (!flat && !items_.empty()) out += "\n" + std::string(indent, ' ');
      out += ']';
      return;
    }
    case Kind::Object: {
      // Small objects of scalars and flat arrays ({"kind": "buffer", "index": 0}) stay on one line.
      bool flat = std::all_of(members_.begin(), members_.end(), [](const auto& m) {
        const Json& v = m.second;
        return v.kind_ != Kind::Object &&
               (v.kind_ != Kind::Array || std::all_of(v.items_.begin(), v.items_.end(), [](const Json& j) {
                  return j.kind_ != Kind::Array && j.kind_ != Kind::Object;
                }));
      });
      if (flat && !members_.empty()) {
        std::string line = "{";
        for (size_t i = 0; i < members_.size(); ++i) {
          line += i ? ", " : "";
          quote(line, members_[i].first);
          line += ": ";
          members_[i].second.dump_to(line, 0);
        }
        line += '}';
        if (line.size() + indent <= 100) {
          out += line;
          return;
        }
      }
      out += '{';
      for (size_t i = 0; i < members_.size(); ++i) {
        out += i ? ",\n" + pad : "\n" + pad;
        quote(out, members_[i].first);
        out += ": ";
        members_[i].second.dump_to(out, indent + 2);
      }
      if (!members_.empty()) out += "\n" + std::string(indent, ' ');
      out += '}';
      return;
    }
  }
}

/// Recursive descent over the JSON grammar (RFC 8259), tracking line and column for messages.
class JsonParser {
 public:
  JsonParser(std::string_view text, const std::string& what) : text_(text), what_(what) {}

  Json document() {
    Json j = value(0);
    skip_space();
    if (pos_ != text_.size()) throw fail("unexpected text after the document");
    return j;
  }

 private:
  Error fail(const std::string& why) const {
    int line = 1, col = 1;
    for (size_t i = 0; i < pos_ && i < text_.size(); ++i) {
      if (text_[i] == '\n') ++line, col = 1;
      else ++col;
    }
    return Error(what_ + ":" + std::to_string(line) + ":" + std::to_string(col) + ": " + why);
  }
  void skip_space() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\n' || text_[pos_] == '\t' || text_[pos_] == '\r'))
      ++pos_;
  }
  bool eat(char c) {
    skip_space();
    if (pos_ < text_.size() && text_[pos_] == c) return ++pos_, true;
    return false;
  }
  void expect(char c) {
    if (!eat(c)) throw fail(std::string("expected '") + c + "'");
  }
  bool keyword(std::string_view word) {
    if (text_.substr(pos_, word.size()) != word) return false;
    pos_ += word.size();
    return true;
  }

  Json value(int depth) {
    if (depth > 64) throw fail("nesting too deep");
    skip_space();
    if (pos_ >= text_.size()) throw fail("unexpected end of the document");
    char c = text_[pos_];
    if (c == '{') {
      ++pos_;
      Json j = Json::object();
      if (eat('}')) return j;
      std::set<std::string> keys;  // has() and set() scan the members: quadratic in a big object
      do {
        skip_space();
        if (pos_ >= text_.size() || text_[pos_] != '"') throw fail("expected a member name");
        std::string key = string();
        expect(':');
        if (!keys.insert(key).second) throw fail("duplicate member \"" + key + "\"");
        j.members_.emplace_back(std::move(key), value(depth + 1));
      } while (eat(','));
      expect('}');
      return j;
    }
    if (c == '[') {
      ++pos_;
      Json j = Json::array();
      if (eat(']')) return j;
      do j.push(value(depth + 1));
      while (eat(','));
      expect(']');
      return j;
    }
    if (c == '"') return Json(string());
    if (keyword("true")) return Json(true);
    if (keyword("false")) return Json(false);
    if (keyword("null")) return Json();
    if (c == '-' || (c >= '0' && c <= '9')) return number();
    throw fail(std::string("unexpected '") + c + "'");
  }

  Json number() {
    size_t start = pos_;
    auto digits = [&] {
      size_t from = pos_;
      while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') ++pos_;
      return pos_ > from;
    };
    if (text_[pos_] == '-') ++pos_;
    if (!digits()) throw fail("malformed number");
    if (pos_ < text_.size() && text_[pos_] == '.' && (++pos_, !digits())) throw fail("malformed number");
    if (pos_ < text_.size() && (text_[pos_] == 'e' || text_[pos_] == 'E')) {
      ++pos_;
      if (pos_ < text_.size() && (text_[pos_] == '+' || text_[pos_] == '-')) ++pos_;
      if (!digits()) throw fail("malformed number");
    }
    Json j;
    j.kind_ = Json::Kind::Number;
    j.text_ = std::string(text_.substr(start, pos_ - start));
    return j;
  }

  std::string string() {
    ++pos_;  // the opening quote
    std::string s;
    while (true) {
      if (pos_ >= text_.size()) throw fail("unterminated string");
      char c = text_[pos_++];
      if (c == '"') return s;
      if (static_cast<unsigned char>(c) < 0x20) throw fail("control character in a string");
      if (c != '\\') {
        s += c;
        continue;
      }
      if (pos_ >= text_.size()) throw fail("unterminated string");
      char e = text_[pos_++];
      switch (e) {
        case '"': s += '"'; break;
        case '\\': s += '\\'; break;
        case '/': s += '/'; break;
        case 'b': s += '\b'; break;
        case 'f': s += '\f'; break;
        case 'n': s += '\n'; break;
        case 'r': s += '\r'; break;
        case 't': s += '\t'; break;
        case 'u': {
          unsigned code = 0;
          auto [end, ec] = std::from_chars(text_.data() + pos_, text_.data() + std::min(pos_ + 4, text_.size()), code, 16);
          if (ec != std::errc() || end != text_.data() + pos_ + 4) throw fail("malformed \\u escape");
          pos_ += 4;
          // UTF-8 for the basic plane (bundles hold ASCII; surrogate pairs are not needed).
          if (code < 0x80) {
            s += static_cast<char>(code);
          } else if (code < 0x800) {
            s += static_cast<char>(0xC0 | (code >> 6));
            s += static_cast<char>(0x80 | (code & 0x3F));
          } else {
            s += static_cast<char>(0xE0 | (code >> 12));
            s += static_cast<char>(0x80 | ((code >> 6) & 0x3F));
            s += static_cast<char>(0x80 | (code & 0x3F));
          }
          break;
        }
        default: throw fail(std::string("unknown escape \\") + e);
      }
    }
  }

  std::string_view text_;
  const std::string& what_;
  size_t pos_ = 0;
};

Json Json::parse(std::string_view text, const std::string& what) { return JsonParser(text, what).document(); }

}  // namespace fuse::runtime
