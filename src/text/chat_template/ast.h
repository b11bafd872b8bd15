#pragma once
// The parsed template: expression and statement nodes, each with its line and column for
// messages, and the Program that owns them.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "retnet/text/chat_template.h"
#include "value.h"

namespace retnet::chat_template_detail {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    Literal,  // value
    Name,     // name
    List,     // args: items
    Dict,     // args: key, value, key, value...
    Attr,     // args[0].name
    Index,    // args[0][args[1]]
    Slice,    // args[0][args[1]:args[2]:args[3]], absent parts null
    Call,     // args[0](args[1..], kwargs)
    Filter,   // args[0] | name(args[1..], kwargs)
    Test,     // args[0] is [not] name(args[1..])
    Unary,    // name in {"-", "+", "not"} of args[0]
    Binary,   // args[0] name args[1]; name is an operator, "in", "not in", "and", "or"
    Cond,     // args[1] if args[0] else args[2] (null: undefined)
  };
  Kind kind;
  int line = 0, column = 0;
  int height = 1;  // levels of this subtree: bounds the evaluator's recursion
  std::string name;
  Value value;
  bool negated = false;
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
};

struct Stmt;
using Body = std::vector<std::unique_ptr<Stmt>>;

struct Stmt {
  enum class Kind {
    Text,      // text
    Output,    // {{ expr }}
    If,        // branches (condition, body), else_body
    For,       // for targets in expr [if filter]: body, else_body
    Set,       // set targets = expr, or set targets[0].attr = expr
    SetBlock,  // set targets[0] %}body{% endset
    Macro,     // macro name(params): body
    Break,
    Continue,
    Block,     // a body rendered as is (transformers' {% generation %})
  };
  Kind kind;
  int line = 0, column = 0;
  std::string text;  // Text; the macro name; the attribute of a namespace Set
  ExprPtr expr, filter;
  std::vector<std::string> targets;
  std::vector<std::pair<ExprPtr, Body>> branches;
  Body body, else_body;
  std::vector<std::pair<std::string, ExprPtr>> params;  // macro parameters and defaults
};

struct Program {
  std::string source, origin;
  ChatTemplateLimits limits;
  Body body;
};

}  // namespace retnet::chat_template_detail
