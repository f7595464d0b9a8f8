#include "frontends/expr/lexer.h"

#include <charconv>
#include <cstdio>

namespace fuse::expr {
namespace {

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_ident_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_ident_char(char c) { return is_ident_start(c) || is_digit(c); }

struct Keyword {
  std::string_view text;
  TokenKind kind;
};
constexpr Keyword kKeywords[] = {
    {"const", TokenKind::Const}, {"fn", TokenKind::Fn},         {"input", TokenKind::Input},
    {"let", TokenKind::Let},     {"output", TokenKind::Output}, {"return", TokenKind::Return},
    {"and", TokenKind::And},     {"or", TokenKind::Or},         {"not", TokenKind::Not},
    {"true", TokenKind::True},   {"false", TokenKind::False},
};

// Longest first, so that "**" wins over "*".
struct Punct {
  std::string_view text;
  TokenKind kind;
};
constexpr Punct kPuncts[] = {
    {"**", TokenKind::StarStar}, {"//", TokenKind::SlashSlash}, {"<=", TokenKind::Le},
    {">=", TokenKind::Ge},       {"==", TokenKind::EqEq},       {"!=", TokenKind::NotEq},
    {"(", TokenKind::LParen},    {")", TokenKind::RParen},      {"[", TokenKind::LBracket},
    {"]", TokenKind::RBracket},  {"{", TokenKind::LBrace},      {"}", TokenKind::RBrace},
    {",", TokenKind::Comma},     {":", TokenKind::Colon},       {".", TokenKind::Dot},
    {"=", TokenKind::Assign},    {"+", TokenKind::Plus},        {"-", TokenKind::Minus},
    {"*", TokenKind::Star},      {"/", TokenKind::Slash},       {"%", TokenKind::Percent},
    {"@", TokenKind::At},        {"<", TokenKind::Lt},          {">", TokenKind::Gt},
};

// Characters users bring from other languages, with what to write instead.
std::string unexpected_character_message(char c) {
  switch (c) {
    case '^': return "'^' is not an operator; use '**' for powers";
    case '!': return "unexpected character '!'; use 'not' for logical negation";
    case '&': return "unexpected character '&'; use 'and'";
    case '|': return "unexpected character '|'; use 'or'";
    case '\'': return "strings are written in double quotes (\"edge\")";
    case '"': return "unterminated string (it must end on its line)";
  }
  unsigned char u = static_cast<unsigned char>(c);
  if (u >= 0x80) return "unexpected non-ASCII character";
  if (u < 0x20 || u == 0x7f) {
    char hex[8];
    std::snprintf(hex, sizeof hex, "0x%02x", u);
    return "unexpected control character " + std::string(hex);
  }
  return "unexpected character '" + std::string(1, c) + "'";
}

class Lexer {
 public:
  explicit Lexer(std::string_view src) : src_(src) {}

  std::vector<Token> run() {
    while (i_ < src_.size()) {
      char c = src_[i_];
      if (c == '\n') {
        push(TokenKind::Newline, i_, 1);
        ++i_;
        ++line_;
        line_start_ = i_;
      } else if (c == ' ' || c == '\t' || c == '\r') {
        ++i_;
      } else if (c == '#') {
        while (i_ < src_.size() && src_[i_] != '\n') ++i_;
      } else if (is_digit(c) || (c == '.' && i_ + 1 < src_.size() && is_digit(src_[i_ + 1]))) {
        number();
      } else if (is_ident_start(c)) {
        identifier();
      } else if (c == '"') {
        string_literal();
      } else {
        punctuation();
      }
    }
    if (tokens_.empty() || tokens_.back().kind != TokenKind::Newline) push(TokenKind::Newline, i_, 0);
    push(TokenKind::End, i_, 0);
    return std::move(tokens_);
  }

 private:
  Token& push(TokenKind kind, size_t begin, size_t length) {
    Token t;
    t.kind = kind;
    t.pos = {line_, static_cast<int>(begin - line_start_) + 1};
    t.text = src_.substr(begin, length);
    tokens_.push_back(std::move(t));
    return tokens_.back();
  }

  void invalid(size_t begin, std::string message) {
    push(TokenKind::Invalid, begin, i_ - begin).message = std::move(message);
  }

  void identifier() {
    size_t begin = i_;
    while (i_ < src_.size() && is_ident_char(src_[i_])) ++i_;
    std::string_view text = src_.substr(begin, i_ - begin);
    TokenKind kind = TokenKind::Ident;
    for (const Keyword& k : kKeywords)
      if (k.text == text) kind = k.kind;
    push(kind, begin, i_ - begin);
  }

  // "text" on one line, no escapes (pad's mode names need none).
  void string_literal() {
    size_t begin = i_++;
    while (i_ < src_.size() && src_[i_] != '"' && src_[i_] != '\n') ++i_;
    if (i_ >= src_.size() || src_[i_] != '"') return invalid(begin, unexpected_character_message('"'));
    ++i_;
    push(TokenKind::String, begin, i_ - begin);
  }

  void digits() {
    while (i_ < src_.size() && is_digit(src_[i_])) ++i_;
  }

  // integer: digits; float: digits '.' [digits] [exponent] | '.' digits [exponent] | digits exponent
  void number() {
    size_t begin = i_;
    bool is_float = false;
    digits();
    if (i_ < src_.size() && src_[i_] == '.') {
      is_float = true;
      ++i_;
      digits();
    }
    if (i_ < src_.size() && (src_[i_] == 'e' || src_[i_] == 'E')) {
      size_t e = i_ + 1;
      if (e < src_.size() && (src_[e] == '+' || src_[e] == '-')) ++e;
      if (e < src_.size() && is_digit(src_[e])) {
        is_float = true;
        i_ = e;
        digits();
      }
    }
    if (i_ < src_.size() && is_ident_char(src_[i_])) {
      char bad = src_[i_];
      while (i_ < src_.size() && is_ident_char(src_[i_])) ++i_;
      return invalid(begin, "invalid number '" + std::string(src_.substr(begin, i_ - begin)) +
                                "': unexpected '" + std::string(1, bad) + "'");
    }
    const char* first = src_.data() + begin;
    const char* last = src_.data() + i_;
    if (is_float) {
      double v = 0;
      auto [end, ec] = std::from_chars(first, last, v);
      if (ec != std::errc() || end != last)
        return invalid(begin, "number '" + std::string(first, last) + "' is out of the range of f64");
      push(TokenKind::Float, begin, i_ - begin).float_value = v;
    } else {
      int64_t v = 0;
      auto [end, ec] = std::from_chars(first, last, v);
      if (ec != std::errc() || end != last)
        return invalid(begin, "integer '" + std::string(first, last) +
                                  "' is too large (the largest is 9223372036854775807)");
      push(TokenKind::Int, begin, i_ - begin).int_value = v;
    }
  }

  void punctuation() {
    for (const Punct& p : kPuncts) {
      if (src_.substr(i_, p.text.size()) == p.text) {
        push(p.kind, i_, p.text.size());
        i_ += p.text.size();
        return;
      }
    }
    size_t begin = i_;
    char c = src_[i_++];
    // One token for a whole multi-byte UTF-8 character.
    if (static_cast<unsigned char>(c) >= 0x80)
      while (i_ < src_.size() && static_cast<unsigned char>(src_[i_]) >= 0x80) ++i_;
    invalid(begin, unexpected_character_message(c));
  }

  std::string_view src_;
  size_t i_ = 0;
  int line_ = 1;
  size_t line_start_ = 0;
  std::vector<Token> tokens_;
};

}  // namespace

std::vector<Token> lex(std::string_view source) { return Lexer(source).run(); }

std::string describe(const Token& t) {
  switch (t.kind) {
    case TokenKind::End: return "end of file";
    case TokenKind::Newline: return "end of line";
    case TokenKind::Ident: return "name '" + std::string(t.text) + "'";
    case TokenKind::Int:
    case TokenKind::Float: return "number '" + std::string(t.text) + "'";
    case TokenKind::String: return "string " + std::string(t.text);
    default: return "'" + std::string(t.text) + "'";
  }
}

bool starts_statement(TokenKind k) {
  return k == TokenKind::Const || k == TokenKind::Fn || k == TokenKind::Input || k == TokenKind::Let ||
         k == TokenKind::Output || k == TokenKind::Return;
}

}  // namespace fuse::expr
