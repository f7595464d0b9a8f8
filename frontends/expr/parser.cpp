#include "frontends/expr/parser.h"

#include <algorithm>

namespace fuse::expr {

std::string_view operator_text(Operator op) {
  switch (op) {
    case Operator::Neg: return "-";
    case Operator::Not: return "not";
    case Operator::Add: return "+";
    case Operator::Sub: return "-";
    case Operator::Mul: return "*";
    case Operator::Div: return "/";
    case Operator::FloorDiv: return "//";
    case Operator::Mod: return "%";
    case Operator::Pow: return "**";
    case Operator::MatMul: return "@";
    case Operator::Lt: return "<";
    case Operator::Le: return "<=";
    case Operator::Gt: return ">";
    case Operator::Ge: return ">=";
    case Operator::Eq: return "==";
    case Operator::Ne: return "!=";
    case Operator::And: return "and";
    case Operator::Or: return "or";
  }
  return "?";
}

namespace {

const std::string kTooDeep =
    "expression is nested too deeply (more than " + std::to_string(kMaxNesting) + " levels)";

struct BinaryLevel {
  TokenKind token;
  Operator op;
};
constexpr BinaryLevel kSumOps[] = {{TokenKind::Plus, Operator::Add}, {TokenKind::Minus, Operator::Sub}};
constexpr BinaryLevel kTermOps[] = {{TokenKind::Star, Operator::Mul},
                                    {TokenKind::Slash, Operator::Div},
                                    {TokenKind::SlashSlash, Operator::FloorDiv},
                                    {TokenKind::Percent, Operator::Mod},
                                    {TokenKind::At, Operator::MatMul}};
constexpr BinaryLevel kComparisonOps[] = {{TokenKind::Lt, Operator::Lt},   {TokenKind::Le, Operator::Le},
                                          {TokenKind::Gt, Operator::Gt},   {TokenKind::Ge, Operator::Ge},
                                          {TokenKind::EqEq, Operator::Eq}, {TokenKind::NotEq, Operator::Ne}};

template <size_t N>
const BinaryLevel* find_op(const BinaryLevel (&ops)[N], TokenKind k) {
  for (const BinaryLevel& b : ops)
    if (b.token == k) return &b;
  return nullptr;
}

ExprPtr make(ExprKind kind, Pos pos, std::vector<ExprPtr> operands = {}) {
  auto e = std::make_unique<Expr>();
  e->kind = kind;
  e->pos = pos;
  for (const ExprPtr& o : operands) e->depth = std::max(e->depth, o->depth + 1);
  // Long operator chains (a + b + ... ) are deep trees though parsed by loops; bounding the
  // height keeps every recursive walk of the tree within the stack.
  if (e->depth > kMaxNesting) throw CompileError{pos, kTooDeep};
  e->operands = std::move(operands);
  return e;
}

class Parser {
 public:
  Parser(const std::vector<Token>& tokens, Diagnostics& diags) : toks_(tokens), diags_(diags) {}

  Program run() {
    Program p;
    for (;;) {
      skip_newlines();
      if (peek().kind == TokenKind::End) break;
      p.statements.push_back(statement_with_recovery(false));
    }
    return p;
  }

 private:
  // ---- tokens ----

  // Inside ( ) and [ ] a newline is just space.
  const Token& peek() {
    while (!open_.empty() && toks_[i_].kind == TokenKind::Newline) ++i_;
    return toks_[i_];
  }
  const Token& peek_next() {
    if (peek().kind == TokenKind::End) return toks_[i_];
    size_t j = i_ + 1;
    while (!open_.empty() && toks_[j].kind == TokenKind::Newline) ++j;
    return toks_[j];
  }
  const Token& next() {
    const Token& t = peek();
    if (t.kind != TokenKind::End) ++i_;
    return t;
  }
  bool accept(TokenKind k) {
    if (peek().kind != k) return false;
    next();
    return true;
  }
  void skip_newlines() {
    while (toks_[i_].kind == TokenKind::Newline) ++i_;
  }
  bool at_line_start() const { return i_ > 0 && toks_[i_ - 1].kind == TokenKind::Newline; }

  /// Throws the error for meeting `t` where `message` was expected; a malformed token reports
  /// its own problem instead.
  [[noreturn]] void fail(const Token& t, std::string message) {
    if (t.kind == TokenKind::Invalid) throw CompileError{t.pos, t.message};
    throw CompileError{t.pos, std::move(message)};
  }
  [[noreturn]] void fail_expected(std::string_view what) {
    const Token& t = peek();
    fail(t, "expected " + std::string(what) + ", found " + describe(t));
  }
  const Token& expect(TokenKind k, std::string_view what) {
    if (peek().kind != k) fail_expected(what);
    return next();
  }
  Ident ident(std::string_view what) {
    const Token& t = expect(TokenKind::Ident, what);
    return {std::string(t.text), t.pos};
  }

  // ---- brackets ----

  struct Open {
    Pos pos;
    TokenKind closer;
  };

  Pos open(TokenKind k) {
    Pos pos = expect(k, k == TokenKind::LParen ? "'('" : "'['").pos;
    open_.push_back({pos, k == TokenKind::LParen ? TokenKind::RParen : TokenKind::RBracket});
    return pos;
  }

  /// A statement keyword starting a line, or the end of the file, inside brackets means the
  /// innermost bracket was left open: blame it rather than the innocent statement that follows.
  void check_unclosed(const Token& t) {
    if (open_.empty() || !(t.kind == TokenKind::End || (starts_statement(t.kind) && at_line_start()))) return;
    throw CompileError{
        open_.back().pos,
        std::string(open_.back().closer == TokenKind::RParen ? "'('" : "'['") + " was never closed"};
  }

  void close() {
    const Token& t = peek();
    TokenKind closer = open_.back().closer;
    if (t.kind != closer) {
      check_unclosed(t);
      fail(t,
           std::string("expected '") + (closer == TokenKind::RParen ? ")" : "]") + "', found " + describe(t));
    }
    open_.pop_back();
    next();
  }

  // ---- statements ----

  Stmt statement_with_recovery(bool in_fn) {
    Stmt s;
    s.pos = peek().pos;
    size_t start = i_;
    try {
      statement(s, in_fn);
    } catch (const CompileError& e) {
      diags_.error(e);
      s.kind = StmtKind::Invalid;
      // A statement rejected at its first token (`return` outside a fn) must still be skipped.
      if (i_ == start && toks_[i_].kind != TokenKind::End) ++i_;
      recover(in_fn);
    }
    return s;
  }

  /// Skips the rest of a bad statement: up to the end of its line, counting brackets so that
  /// an expression spanning lines or a whole fn body is skipped as one. Stops early at a
  /// statement keyword starting a line, and (in a fn body) before the closing '}'.
  void recover(bool in_fn) {
    int brackets = static_cast<int>(open_.size());
    int braces = 0;
    open_.clear();
    for (;;) {
      const Token& t = toks_[i_];
      if (t.kind == TokenKind::End) return;
      if (braces == 0 && starts_statement(t.kind) && at_line_start()) return;
      if (t.kind == TokenKind::RBrace && braces == 0 && in_fn) return;
      ++i_;
      switch (t.kind) {
        case TokenKind::Newline:
          if (brackets == 0 && braces == 0) return;
          break;
        case TokenKind::LParen:
        case TokenKind::LBracket: ++brackets; break;
        case TokenKind::RParen:
        case TokenKind::RBracket: brackets = std::max(0, brackets - 1); break;
        case TokenKind::LBrace: ++braces; break;
        case TokenKind::RBrace: braces = std::max(0, braces - 1); break;
        default: break;
      }
    }
  }

  void end_of_statement(bool in_fn) {
    const Token& t = peek();
    if (t.kind == TokenKind::Newline)
      next();
    else if (t.kind != TokenKind::End && !(in_fn && t.kind == TokenKind::RBrace))
      fail(t, "expected end of line after the statement, found " + describe(t));
  }

  void statement(Stmt& s, bool in_fn) {
    const Token& t = peek();
    if (in_fn && t.kind != TokenKind::Let && t.kind != TokenKind::Return && t.kind != TokenKind::Fn)
      fail(t, "expected 'let' or 'return' in a fn body, found " + describe(t));
    switch (t.kind) {
      case TokenKind::Const:
      case TokenKind::Output: {
        next();
        s.names.push_back(
            ident(t.kind == TokenKind::Const ? "a name after 'const'" : "a name after 'output'"));
        expect(TokenKind::Assign, "'=' after the name");
        s.value = expression();
        end_of_statement(in_fn);
        s.kind = t.kind == TokenKind::Const ? StmtKind::Const : StmtKind::Output;
        return;
      }
      case TokenKind::Let: {
        next();
        if (peek().kind == TokenKind::LParen) {
          open(TokenKind::LParen);
          do s.names.push_back(ident("a name to unpack into"));
          while (accept(TokenKind::Comma) && peek().kind != TokenKind::RParen);
          close();
        } else {
          s.names.push_back(ident("a name or '(' after 'let'"));
        }
        expect(TokenKind::Assign, "'=' after the name");
        s.value = expression();
        end_of_statement(in_fn);
        s.kind = StmtKind::Let;
        return;
      }
      case TokenKind::Input: {
        next();
        s.names.push_back(ident("a name after 'input'"));
        expect(TokenKind::Colon, "':' and a type after the input name");
        s.dtype = ident("a dtype (bool, i32, i64, f32 or f64)");
        if (peek().kind == TokenKind::LBracket) {
          open(TokenKind::LBracket);
          s.has_dims = true;
          while (peek().kind != TokenKind::RBracket) {
            s.dims.push_back(expression());
            if (!accept(TokenKind::Comma)) break;
          }
          close();
        }
        end_of_statement(in_fn);
        s.kind = StmtKind::Input;
        return;
      }
      case TokenKind::Fn:
        if (in_fn) fail(t, "a fn cannot be defined inside another fn");
        next();
        return fn(s);
      case TokenKind::Return:
        if (!in_fn) fail(t, "'return' outside of a fn body");
        next();
        s.value = expression();
        end_of_statement(in_fn);
        s.kind = StmtKind::Return;
        return;
      case TokenKind::RBrace: next(); throw CompileError{t.pos, "unmatched '}'"};
      case TokenKind::Ident:
        if (peek_next().kind == TokenKind::Assign)
          fail(t, "expected a statement; to define '" + std::string(t.text) + "' write 'let " +
                      std::string(t.text) + " = ...'");
        break;
      default: break;
    }
    fail(t, "expected a statement (const, fn, input, let or output), found " + describe(t));
  }

  void fn(Stmt& s) {
    s.names.push_back(ident("a name after 'fn'"));
    open(TokenKind::LParen);
    while (peek().kind != TokenKind::RParen) {
      s.params.push_back(ident("a parameter name"));
      if (!accept(TokenKind::Comma)) break;
    }
    close();
    if (accept(TokenKind::Assign)) {
      Stmt ret;
      ret.kind = StmtKind::Return;
      ret.pos = peek().pos;
      ret.value = expression();
      s.body.push_back(std::move(ret));
      end_of_statement(false);
      s.kind = StmtKind::Fn;
      return;
    }
    Pos brace = peek().pos;
    if (!accept(TokenKind::LBrace)) fail_expected("'=' or '{' after the parameters");
    bool ok = true;
    for (;;) {
      skip_newlines();
      const Token& t = peek();
      if (t.kind == TokenKind::RBrace) break;
      // A top-level statement here with no '}' ahead means the '}' is missing: say so, and
      // let that statement parse normally.
      if (t.kind == TokenKind::End || (starts_statement(t.kind) && t.kind != TokenKind::Let &&
                                       t.kind != TokenKind::Return && !closing_brace_ahead())) {
        diags_.error(brace, "'{' of fn '" + s.names[0].name + "' was never closed");
        return;
      }
      Stmt b = statement_with_recovery(true);
      ok = ok && b.kind != StmtKind::Invalid;
      s.body.push_back(std::move(b));
    }
    next();
    end_of_statement(false);
    // The body's own errors are reported already; the fn stays Invalid so calls to it are quiet.
    if (ok) s.kind = StmtKind::Fn;
  }

  /// Whether a '}' comes before the next `fn` (or the end), looking past the current token.
  bool closing_brace_ahead() const {
    for (size_t j = i_ + 1; j < toks_.size(); ++j) {
      if (toks_[j].kind == TokenKind::RBrace) return true;
      if (toks_[j].kind == TokenKind::Fn) return false;
    }
    return false;
  }

  // ---- expressions, by increasing precedence ----

  ExprPtr expression() {
    DepthGuard guard(depth_, kMaxNesting, peek().pos, kTooDeep);
    return or_expr();
  }

  ExprPtr binary(Operator op, Pos pos, ExprPtr a, ExprPtr b) {
    std::vector<ExprPtr> operands;
    operands.push_back(std::move(a));
    operands.push_back(std::move(b));
    ExprPtr e = make(ExprKind::Binary, pos, std::move(operands));
    e->op = op;
    return e;
  }

  ExprPtr or_expr() {
    ExprPtr e = and_expr();
    while (peek().kind == TokenKind::Or) {
      Pos pos = next().pos;
      e = binary(Operator::Or, pos, std::move(e), and_expr());
    }
    return e;
  }

  ExprPtr and_expr() {
    ExprPtr e = comparison();
    while (peek().kind == TokenKind::And) {
      Pos pos = next().pos;
      e = binary(Operator::And, pos, std::move(e), comparison());
    }
    return e;
  }

  ExprPtr comparison() {
    ExprPtr e = sum();
    const BinaryLevel* b = find_op(kComparisonOps, peek().kind);
    if (!b) return e;
    Pos pos = next().pos;
    e = binary(b->op, pos, std::move(e), sum());
    if (const BinaryLevel* again = find_op(kComparisonOps, peek().kind))
      throw CompileError{peek().pos, "comparisons cannot be chained; write 'a " +
                                         std::string(operator_text(b->op)) + " b and b " +
                                         std::string(operator_text(again->op)) + " c'"};
    return e;
  }

  ExprPtr sum() {
    ExprPtr e = term();
    while (const BinaryLevel* b = find_op(kSumOps, peek().kind)) {
      Pos pos = next().pos;
      e = binary(b->op, pos, std::move(e), term());
    }
    return e;
  }

  ExprPtr term() {
    ExprPtr e = unary();
    while (const BinaryLevel* b = find_op(kTermOps, peek().kind)) {
      Pos pos = next().pos;
      e = binary(b->op, pos, std::move(e), unary());
    }
    return e;
  }

  ExprPtr unary_node(Operator op, Pos pos, ExprPtr operand) {
    std::vector<ExprPtr> operands;
    operands.push_back(std::move(operand));
    ExprPtr e = make(ExprKind::Unary, pos, std::move(operands));
    e->op = op;
    return e;
  }

  // Unary `-` and `not` bind alike, tighter than `*` (the language's table, unlike Python's
  // `not`): `not a < b` is `(not a) < b`.
  ExprPtr unary() {
    TokenKind kind = peek().kind;
    if (kind != TokenKind::Minus && kind != TokenKind::Not) return power();
    DepthGuard guard(depth_, kMaxNesting, peek().pos, kTooDeep);
    Pos pos = next().pos;
    return unary_node(kind == TokenKind::Minus ? Operator::Neg : Operator::Not, pos, unary());
  }

  // `**` is right-associative and its exponent may carry a sign: 2**-1, 2**3**2 = 2**9.
  ExprPtr power() {
    ExprPtr base = postfix();
    if (peek().kind != TokenKind::StarStar) return base;
    DepthGuard guard(depth_, kMaxNesting, peek().pos, kTooDeep);
    Pos pos = next().pos;
    return binary(Operator::Pow, pos, std::move(base), unary());
  }

  ExprPtr postfix() {
    ExprPtr e = primary();
    for (;;) {
      const Token& t = peek();
      if (t.kind == TokenKind::Dot) {
        next();
        const Token& attr = peek();
        if (attr.kind != TokenKind::Ident || attr.text != "T")
          fail(attr, "expected 'T' after '.' (x.T is the transpose), found " + describe(attr));
        next();
        std::vector<ExprPtr> operands;
        operands.push_back(std::move(e));
        e = make(ExprKind::Transpose, t.pos, std::move(operands));
      } else if (t.kind == TokenKind::LParen) {
        fail(t, "only a fn or builtin name can be called");
      } else if (t.kind == TokenKind::LBracket) {
        e = index(std::move(e));
      } else {
        return e;
      }
    }
  }

  // np-views: base[item, ...] with items `i`, `a:b:s` (any part omitted), `None`, `...`.
  ExprPtr index(ExprPtr base) {
    Pos opener = open(TokenKind::LBracket);
    std::vector<ExprPtr> operands;
    operands.push_back(std::move(base));
    while (peek().kind != TokenKind::RBracket) {
      operands.push_back(index_item());
      if (!accept(TokenKind::Comma)) break;
    }
    close();
    if (operands.size() == 1) throw CompileError{opener, "empty index: write x[:] for all of x"};
    return make(ExprKind::Index, opener, std::move(operands));
  }

  ExprPtr index_item() {
    const Token& t = peek();
    if (t.kind == TokenKind::Dot) {
      for (int k = 0; k < 3; ++k)
        if (!accept(TokenKind::Dot)) fail(peek(), "expected '...' (an ellipsis), found " + describe(peek()));
      return make(ExprKind::Ellipsis, t.pos);
    }
    auto ends_part = [&] {
      TokenKind k = peek().kind;
      return k == TokenKind::Colon || k == TokenKind::Comma || k == TokenKind::RBracket;
    };
    std::vector<ExprPtr> parts;
    int which = 0;
    if (!ends_part()) {
      parts.push_back(expression());
      which |= 1;
    }
    if (peek().kind != TokenKind::Colon) {
      if (parts.empty()) fail_expected("an index");
      return std::move(parts[0]);
    }
    Pos colon = next().pos;
    if (!ends_part()) {
      parts.push_back(expression());
      which |= 2;
    }
    if (accept(TokenKind::Colon) && !ends_part()) {
      parts.push_back(expression());
      which |= 4;
    }
    Pos pos = which & 1 ? parts[0]->pos : colon;
    ExprPtr slice = make(ExprKind::Slice, pos, std::move(parts));
    slice->int_value = which;
    return slice;
  }

  ExprPtr primary() {
    const Token& t = peek();
    switch (t.kind) {
      case TokenKind::String: {
        ExprPtr e = make(ExprKind::String, next().pos);
        e->name = std::string(t.text.substr(1, t.text.size() - 2));
        return e;
      }
      case TokenKind::Int: {
        ExprPtr e = make(ExprKind::Int, next().pos);
        e->int_value = t.int_value;
        return e;
      }
      case TokenKind::Float: {
        ExprPtr e = make(ExprKind::Float, next().pos);
        e->float_value = t.float_value;
        return e;
      }
      case TokenKind::True:
      case TokenKind::False: {
        ExprPtr e = make(ExprKind::Bool, next().pos);
        e->bool_value = t.kind == TokenKind::True;
        return e;
      }
      case TokenKind::Ident: {
        next();
        if (peek().kind == TokenKind::LParen) return call(t);
        ExprPtr e = make(ExprKind::Name, t.pos);
        e->name = std::string(t.text);
        return e;
      }
      case TokenKind::LParen: {
        Pos opener = open(TokenKind::LParen);
        ExprPtr first = expression();
        if (peek().kind != TokenKind::Comma) {
          close();
          return first;
        }
        std::vector<ExprPtr> items;
        items.push_back(std::move(first));
        while (accept(TokenKind::Comma) && peek().kind != TokenKind::RParen) items.push_back(expression());
        close();
        return make(ExprKind::Tuple, opener, std::move(items));
      }
      case TokenKind::LBracket: {
        Pos opener = open(TokenKind::LBracket);
        std::vector<ExprPtr> items;
        while (peek().kind != TokenKind::RBracket) {
          items.push_back(expression());
          if (!accept(TokenKind::Comma)) break;
        }
        close();
        return make(ExprKind::List, opener, std::move(items));
      }
      default: break;
    }
    check_unclosed(t);
    fail_expected("an expression");
  }

  ExprPtr call(const Token& callee) {
    open(TokenKind::LParen);
    ExprPtr e = make(ExprKind::Call, callee.pos);
    e->name = std::string(callee.text);
    bool keywords = false;
    while (peek().kind != TokenKind::RParen) {
      Arg a;
      a.pos = peek().pos;
      if (peek().kind == TokenKind::Ident && peek_next().kind == TokenKind::Assign) {
        a.keyword = std::string(next().text);
        next();
        keywords = true;
      } else if (keywords) {
        throw CompileError{a.pos, "positional argument after a keyword argument"};
      }
      a.value = expression();
      e->depth = std::max(e->depth, a.value->depth + 1);
      e->args.push_back(std::move(a));
      if (!accept(TokenKind::Comma)) break;
    }
    if (e->depth > kMaxNesting) throw CompileError{callee.pos, kTooDeep};
    close();
    return e;
  }

  const std::vector<Token>& toks_;
  Diagnostics& diags_;
  size_t i_ = 0;
  std::vector<Open> open_;  // the enclosing ( and [, innermost last
  int depth_ = 0;           // recursion of the parser itself: parentheses, prefix operators, **
};

}  // namespace

Program parse(const std::vector<Token>& tokens, Diagnostics& diags) { return Parser(tokens, diags).run(); }

}  // namespace fuse::expr
