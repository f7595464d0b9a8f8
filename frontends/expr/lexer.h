// Tokens of the .expr language. The lexer never fails: a malformed character or number becomes
// an Invalid token carrying its message, reported when the parser meets it.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "frontends/expr/diagnostics.h"

namespace fuse::expr {

enum class TokenKind {
  End, Newline, Ident, Int, Float, Invalid,
  String,  // "edge": only as an argument (pad's mode); text keeps the quotes
  // keywords
  Const, Fn, Input, Let, Output, Return, And, Or, Not, True, False,
  // punctuation
  LParen, RParen, LBracket, RBracket, LBrace, RBrace, Comma, Colon, Dot, Assign,
  // operators
  Plus, Minus, Star, StarStar, Slash, SlashSlash, Percent, At, Lt, Le, Gt, Ge, EqEq, NotEq,
};

struct Token {
  TokenKind kind = TokenKind::End;
  Pos pos;
  std::string_view text;    // the token's characters in the source
  int64_t int_value = 0;    // Int
  double float_value = 0;   // Float
  std::string message;      // Invalid: what is wrong
};

/// Splits the source into tokens. Every line ends with a Newline token (comments dropped) and
/// the list ends with End.
std::vector<Token> lex(std::string_view source);

/// How a token is named in messages: "name 'x'", "number '2'", "'('", "end of line".
std::string describe(const Token& t);

/// True for the keywords that can only start a statement: a safe place to resume after an error.
bool starts_statement(TokenKind k);

}  // namespace fuse::expr
