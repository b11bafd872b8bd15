// Recursive descent over the tokens with Jinja's precedence: ternary "if", or, and, not,
// comparisons and "in", + -, ~, * / // %, **, unary - +, then postfix (attribute, subscript,
// slice, call), filters and "is" tests.
#include "parser.h"

#include <charconv>
#include <cstdlib>

#include "retnet/core/error.h"

namespace retnet::chat_template_detail {
namespace {

constexpr int kMaxNesting = 200;  // expressions and blocks: bounds the parser's own recursion
// Levels of one expression's tree, counted while it is built: "1 + 1 + ..." and "x.a.b..." grow
// a left-leaning tree without recursing in the parser, and evaluating (or freeing) it recurses.
constexpr int kMaxExprHeight = 256;

class Parser {
 public:
  Parser(const std::vector<Token>& tokens, const std::string& origin) : t_(tokens), origin_(origin) {}

  Body parse_all() {
    std::string stopped_at;
    Body body = parse_body({}, stopped_at);
    return body;
  }

 private:
  // Statements until a {% tag %} whose keyword is in `ends` (consumed up to the keyword).
  Body parse_body(const std::vector<std::string>& ends, std::string& stopped_at) {
    Nest nest(*this);
    Body body;
    while (true) {
      const Token& tok = peek();
      if (tok.type == Token::Type::End) {
        if (!ends.empty()) fail(tok, "unexpected end of template: expected {% " + ends.front() + " %}");
        return body;
      }
      if (tok.type == Token::Type::Text) {
        body.push_back(stmt(Stmt::Kind::Text, tok));
        body.back()->text = tok.text;
        ++pos_;
      } else if (tok.type == Token::Type::ExprBegin) {
        auto s = stmt(Stmt::Kind::Output, tok);
        ++pos_;
        s->expr = parse_expr();
        expect(Token::Type::ExprEnd, "'}}'");
        body.push_back(std::move(s));
      } else if (tok.type == Token::Type::StmtBegin) {
        const Token& kw = t_[pos_ + 1];
        if (kw.type != Token::Type::Name) fail(kw, "expected a statement keyword after '{%'");
        for (const auto& e : ends)
          if (kw.text == e) {
            pos_ += 2;
            stopped_at = e;
            return body;
          }
        pos_ += 2;
        body.push_back(parse_statement(kw));
      } else {
        fail(tok, "unexpected '" + tok.text + "'");
      }
    }
  }

  std::unique_ptr<Stmt> parse_statement(const Token& kw) {
    const std::string& k = kw.text;
    std::string stop;
    if (k == "if") {
      auto s = stmt(Stmt::Kind::If, kw);
      ExprPtr cond = parse_expr();
      end_tag();
      while (true) {
        Body b = parse_body({"elif", "else", "endif"}, stop);
        s->branches.emplace_back(std::move(cond), std::move(b));
        if (stop == "elif") {
          cond = parse_expr();
          end_tag();
          continue;
        }
        if (stop == "else") {
          end_tag();
          s->else_body = parse_body({"endif"}, stop);
        }
        end_tag();
        return s;
      }
    }
    if (k == "for") {
      auto s = stmt(Stmt::Kind::For, kw);
      do {
        s->targets.push_back(name_token("a loop variable"));
      } while (accept_op(","));
      if (!accept_name("in")) fail(peek(), "expected 'in' in a for loop");
      s->expr = parse_or_test();  // "if" after the iterable filters the loop, not a ternary
      if (accept_name("if")) s->filter = parse_or_test();
      end_tag();
      s->body = parse_body({"else", "endfor"}, stop);
      if (stop == "else") {
        end_tag();
        s->else_body = parse_body({"endfor"}, stop);
      }
      end_tag();
      return s;
    }
    if (k == "set") {
      auto s = stmt(Stmt::Kind::Set, kw);
      s->targets.push_back(name_token("a variable name"));
      if (accept_op(".")) {
        s->text = name_token("an attribute name");
      } else {
        while (accept_op(",")) s->targets.push_back(name_token("a variable name"));
      }
      if (peek().type == Token::Type::StmtEnd && s->targets.size() == 1 && s->text.empty()) {
        end_tag();
        s->kind = Stmt::Kind::SetBlock;
        s->body = parse_body({"endset"}, stop);
        end_tag();
        return s;
      }
      if (!accept_op("=")) fail(peek(), "expected '=' in a set statement");
      s->expr = parse_tuple_or_expr();
      end_tag();
      return s;
    }
    if (k == "macro") {
      auto s = stmt(Stmt::Kind::Macro, kw);
      s->text = name_token("a macro name");
      expect_op("(");
      while (!accept_op(")")) {
        std::string param = name_token("a parameter name");
        ExprPtr def;
        if (accept_op("=")) def = parse_expr();
        s->params.emplace_back(std::move(param), std::move(def));
        if (!accept_op(",")) {
          expect_op(")");
          break;
        }
      }
      end_tag();
      s->body = parse_body({"endmacro"}, stop);
      end_tag();
      return s;
    }
    if (k == "break" || k == "continue") {
      auto s = stmt(k == "break" ? Stmt::Kind::Break : Stmt::Kind::Continue, kw);
      end_tag();
      return s;
    }
    if (k == "generation") {
      auto s = stmt(Stmt::Kind::Block, kw);
      end_tag();
      s->body = parse_body({"endgeneration"}, stop);
      end_tag();
      return s;
    }
    fail(kw, "unknown or misplaced statement '" + k + "'");
  }

  // "a, b" in a set statement builds a list (Python's tuple).
  ExprPtr parse_tuple_or_expr() {
    ExprPtr first = parse_expr();
    if (!(peek().type == Token::Type::Op && peek().text == ",")) return first;
    auto list = expr(Expr::Kind::List, peek());
    list->args.push_back(std::move(first));
    while (accept_op(",")) list->args.push_back(parse_expr());
    return sealed(std::move(list));
  }

  ExprPtr parse_expr() {
    Nest nest(*this);
    ExprPtr value = parse_or_test();
    if (peek().type == Token::Type::Name && peek().text == "if") {
      auto c = expr(Expr::Kind::Cond, peek());
      ++pos_;
      c->args.push_back(parse_or_test());
      c->args.push_back(std::move(value));
      c->args.push_back(accept_name("else") ? parse_expr() : nullptr);
      return sealed(std::move(c));
    }
    return value;
  }

  ExprPtr parse_or_test() {
    ExprPtr left = parse_and();
    while (peek_name("or")) left = binary("or", std::move(left), [&] { return parse_and(); });
    return left;
  }
  ExprPtr parse_and() {
    ExprPtr left = parse_not();
    while (peek_name("and")) left = binary("and", std::move(left), [&] { return parse_not(); });
    return left;
  }
  ExprPtr parse_not() {
    if (peek_name("not")) {
      Nest nest(*this);
      auto u = expr(Expr::Kind::Unary, peek());
      ++pos_;
      u->name = "not";
      u->args.push_back(parse_not());
      return sealed(std::move(u));
    }
    return parse_compare();
  }
  ExprPtr parse_compare() {
    ExprPtr left = parse_math1();
    while (true) {
      const Token& tok = peek();
      std::string op;
      if (tok.type == Token::Type::Op &&
          (tok.text == "==" || tok.text == "!=" || tok.text == "<" || tok.text == "<=" || tok.text == ">" || tok.text == ">="))
        op = tok.text;
      else if (tok.type == Token::Type::Name && tok.text == "in")
        op = "in";
      else if (tok.type == Token::Type::Name && tok.text == "not" && t_[pos_ + 1].type == Token::Type::Name && t_[pos_ + 1].text == "in") {
        op = "not in";
        ++pos_;
      } else
        return left;
      left = binary(op, std::move(left), [&] { return parse_math1(); });
    }
  }
  ExprPtr parse_math1() {
    ExprPtr left = parse_concat();
    while (peek_op("+") || peek_op("-")) left = binary(peek().text, std::move(left), [&] { return parse_concat(); });
    return left;
  }
  ExprPtr parse_concat() {
    ExprPtr left = parse_math2();
    while (peek_op("~")) left = binary("~", std::move(left), [&] { return parse_math2(); });
    return left;
  }
  ExprPtr parse_math2() {
    ExprPtr left = parse_pow();
    while (peek_op("*") || peek_op("/") || peek_op("//") || peek_op("%"))
      left = binary(peek().text, std::move(left), [&] { return parse_pow(); });
    return left;
  }
  ExprPtr parse_pow() {
    ExprPtr left = parse_unary();
    while (peek_op("**")) left = binary("**", std::move(left), [&] { return parse_unary(); });
    return left;
  }
  ExprPtr parse_unary(bool with_filters = true) {
    Nest nest(*this);
    if (peek_op("-") || peek_op("+")) {
      auto u = expr(Expr::Kind::Unary, peek());
      u->name = peek().text;
      ++pos_;
      u->args.push_back(parse_unary(false));  // Jinja: "-3 | abs" filters -3
      u = sealed(std::move(u));
      return with_filters ? parse_filters(std::move(u)) : std::move(u);
    }
    ExprPtr operand = parse_postfix(parse_primary());
    return with_filters ? parse_filters(std::move(operand)) : std::move(operand);
  }

  ExprPtr parse_primary() {
    Nest nest(*this);
    const Token& tok = peek();
    switch (tok.type) {
      case Token::Type::String: {
        auto e = expr(Expr::Kind::Literal, tok);
        std::string s;
        while (peek().type == Token::Type::String) s += t_[pos_++].text;  // "a" "b" concatenates
        e->value = Value::string(std::move(s));
        return e;
      }
      case Token::Type::Int: {
        auto e = expr(Expr::Kind::Literal, tok);
        int64_t v = 0;
        const auto r = std::from_chars(tok.text.data(), tok.text.data() + tok.text.size(), v);
        if (r.ec != std::errc()) fail(tok, "integer literal out of range: " + tok.text);
        e->value = Value::integer(v);
        ++pos_;
        return e;
      }
      case Token::Type::Float: {
        auto e = expr(Expr::Kind::Literal, tok);
        e->value = Value::number(std::strtod(tok.text.c_str(), nullptr));
        ++pos_;
        return e;
      }
      case Token::Type::Name: {
        auto e = expr(Expr::Kind::Literal, tok);
        const std::string& n = tok.text;
        if (n == "true" || n == "True") e->value = Value::boolean(true);
        else if (n == "false" || n == "False") e->value = Value::boolean(false);
        else if (n == "none" || n == "None") e->value = Value::none();
        else {
          e->kind = Expr::Kind::Name;
          e->name = n;
        }
        ++pos_;
        return e;
      }
      case Token::Type::Op: {
        if (tok.text == "(") {
          ++pos_;
          ExprPtr first = parse_expr();
          if (accept_op(")")) return first;
          auto list = expr(Expr::Kind::List, tok);  // a tuple
          list->args.push_back(std::move(first));
          while (accept_op(",")) {
            if (peek_op(")")) break;
            list->args.push_back(parse_expr());
          }
          expect_op(")");
          return sealed(std::move(list));
        }
        if (tok.text == "[") {
          ++pos_;
          auto list = expr(Expr::Kind::List, tok);
          while (!accept_op("]")) {
            list->args.push_back(parse_expr());
            if (!accept_op(",")) {
              expect_op("]");
              break;
            }
          }
          return sealed(std::move(list));
        }
        if (tok.text == "{") {
          ++pos_;
          auto dict = expr(Expr::Kind::Dict, tok);
          while (!accept_op("}")) {
            dict->args.push_back(parse_expr());
            expect_op(":");
            dict->args.push_back(parse_expr());
            if (!accept_op(",")) {
              expect_op("}");
              break;
            }
          }
          return sealed(std::move(dict));
        }
        break;
      }
      default: break;
    }
    fail(tok, "expected an expression, got " + describe(tok));
  }

  ExprPtr parse_postfix(ExprPtr e) {
    while (true) {
      const Token& tok = peek();
      if (accept_op(".")) {
        auto a = expr(Expr::Kind::Attr, tok);
        a->name = peek().type == Token::Type::Int ? t_[pos_++].text : name_token("an attribute name");
        a->args.push_back(std::move(e));
        e = sealed(std::move(a));
      } else if (accept_op("[")) {
        auto s = expr(Expr::Kind::Index, tok);
        s->args.push_back(std::move(e));
        ExprPtr parts[3];
        int part = 0;
        bool slice = false;
        while (true) {
          if (peek_op(":")) {
            ++pos_;
            slice = true;
            if (++part > 2) fail(tok, "a slice has at most three parts");
            continue;
          }
          if (peek_op("]")) break;
          if (parts[part]) fail(peek(), "expected ':' or ']' in a subscript");
          parts[part] = parse_expr();
        }
        expect_op("]");
        if (slice) {
          s->kind = Expr::Kind::Slice;
          for (auto& p : parts) s->args.push_back(std::move(p));
        } else {
          if (!parts[0]) fail(tok, "empty subscript");
          s->args.push_back(std::move(parts[0]));
        }
        e = sealed(std::move(s));
      } else if (peek_op("(")) {
        auto c = expr(Expr::Kind::Call, tok);
        c->line = e->line;  // errors of a call point at its callee
        c->column = e->column;
        c->args.push_back(std::move(e));
        parse_call_args(*c);
        e = sealed(std::move(c));
      } else {
        return e;
      }
    }
  }

  // "(a, b, key=c)", appended to e's args and kwargs.
  void parse_call_args(Expr& e) {
    expect_op("(");
    while (!accept_op(")")) {
      if (peek().type == Token::Type::Name && t_[pos_ + 1].type == Token::Type::Op && t_[pos_ + 1].text == "=") {
        std::string key = t_[pos_].text;
        pos_ += 2;
        e.kwargs.emplace_back(std::move(key), parse_expr());
      } else {
        if (!e.kwargs.empty()) fail(peek(), "a positional argument after a keyword argument");
        e.args.push_back(parse_expr());
      }
      if (!accept_op(",")) {
        expect_op(")");
        break;
      }
    }
  }

  ExprPtr parse_filters(ExprPtr e) {
    while (true) {
      if (peek_op("|")) {
        auto f = expr(Expr::Kind::Filter, peek());
        ++pos_;
        f->name = name_token("a filter name");
        f->args.push_back(std::move(e));
        if (peek_op("(")) parse_call_args(*f);
        e = parse_postfix(sealed(std::move(f)));
      } else if (peek_name("is")) {
        auto t = expr(Expr::Kind::Test, peek());
        ++pos_;
        if (accept_name("not")) t->negated = true;
        const Token& name = peek();
        if (name.type != Token::Type::Name) fail(name, "expected a test name after 'is'");
        t->name = name.text;
        ++pos_;
        t->args.push_back(std::move(e));
        if (peek_op("(")) {
          parse_call_args(*t);
        } else if (peek().type == Token::Type::String || peek().type == Token::Type::Int ||
                   peek().type == Token::Type::Float) {
          t->args.push_back(parse_primary());  // "x is divisibleby 3", "x is equalto 'a'"
        }
        e = sealed(std::move(t));
      } else {
        return e;
      }
    }
  }

  template <typename F>
  ExprPtr binary(const std::string& op, ExprPtr left, F&& right) {
    Nest nest(*this);
    auto b = expr(Expr::Kind::Binary, peek());
    ++pos_;  // the operator ("in" of "not in": parse_compare took the "not")
    b->name = op;
    b->args.push_back(std::move(left));
    b->args.push_back(right());
    return sealed(std::move(b));
  }

  // Guards the recursion depth, so "((((...))))" ends in an Error, not a stack overflow.
  struct Nest {
    explicit Nest(Parser& p) : p_(p) {
      if (++p_.depth_ > kMaxNesting) p_.fail(p_.peek(), "template nested deeper than " + std::to_string(kMaxNesting) + " levels");
    }
    ~Nest() { --p_.depth_; }
    Parser& p_;
  };

  // Sets e's height from its children's and refuses a tree taller than kMaxExprHeight.
  ExprPtr sealed(ExprPtr e) {
    int below = 0;
    for (const auto& a : e->args)
      if (a) below = std::max(below, a->height);
    for (const auto& kv : e->kwargs) below = std::max(below, kv.second->height);
    e->height = below + 1;
    if (e->height > kMaxExprHeight) {
      const Token at{Token::Type::End, "", e->line, e->column};
      fail(at, "expression nested deeper than " + std::to_string(kMaxExprHeight) +
                   " levels (operators, attributes, calls and filters together)");
    }
    return e;
  }

  std::unique_ptr<Stmt> stmt(Stmt::Kind k, const Token& at) {
    auto s = std::make_unique<Stmt>();
    s->kind = k;
    s->line = at.line;
    s->column = at.column;
    return s;
  }
  ExprPtr expr(Expr::Kind k, const Token& at) {
    auto e = std::make_unique<Expr>();
    e->kind = k;
    e->line = at.line;
    e->column = at.column;
    return e;
  }
  const Token& peek() const { return t_[pos_]; }
  bool peek_op(const char* op) const { return peek().type == Token::Type::Op && peek().text == op; }
  bool peek_name(const char* n) const { return peek().type == Token::Type::Name && peek().text == n; }
  bool accept_op(const char* op) {
    if (!peek_op(op)) return false;
    ++pos_;
    return true;
  }
  bool accept_name(const char* n) {
    if (!peek_name(n)) return false;
    ++pos_;
    return true;
  }
  void expect_op(const char* op) {
    if (!accept_op(op)) fail(peek(), std::string("expected '") + op + "', got " + describe(peek()));
  }
  void expect(Token::Type type, const char* what) {
    if (peek().type != type) fail(peek(), std::string("expected ") + what + ", got " + describe(peek()));
    ++pos_;
  }
  void end_tag() { expect(Token::Type::StmtEnd, "'%}'"); }
  std::string name_token(const char* what) {
    if (peek().type != Token::Type::Name) fail(peek(), std::string("expected ") + what + ", got " + describe(peek()));
    return t_[pos_++].text;
  }
  static std::string describe(const Token& t) {
    switch (t.type) {
      case Token::Type::Text: return "text";
      case Token::Type::ExprBegin: return "'{{'";
      case Token::Type::ExprEnd: return "'}}'";
      case Token::Type::StmtBegin: return "'{%'";
      case Token::Type::StmtEnd: return "'%}'";
      case Token::Type::End: return "the end of the template";
      case Token::Type::String: return "a string";
      default: return "'" + t.text + "'";
    }
  }
  [[noreturn]] void fail(const Token& at, const std::string& what) const {
    throw Error(fmt::format("chat template {}:{}:{}: {}", origin_, at.line, at.column, what));
  }

  const std::vector<Token>& t_;
  const std::string& origin_;
  size_t pos_ = 0;
  int depth_ = 0;
};

}  // namespace

Body parse_tokens(const std::vector<Token>& tokens, const std::string& origin) {
  return Parser(tokens, origin).parse_all();
}

}  // namespace retnet::chat_template_detail
