// Statement execution and expression evaluation with Jinja's semantics: for loops get their own
// scope (hence namespace()), "if" does not; undefined prints as nothing and iterates as empty.
#include "evaluator.h"

#include <cmath>

#include "builtins.h"
#include "retnet/core/error.h"

namespace retnet::chat_template_detail {
namespace {

// An Error that already carries the template's name and position.
class LocatedError : public Error {
 public:
  using Error::Error;
};

// Python's ints do not overflow; ours are 64-bit, so an overflow is an Error, not a wrap.
template <typename Op>
int64_t checked(Op op, int64_t a, int64_t b) {
  int64_t r = 0;
  RETNET_CHECK(!op(a, b, &r), "integer overflow");
  return r;
}
bool add_overflows(int64_t a, int64_t b, int64_t* r) { return __builtin_add_overflow(a, b, r); }
bool sub_overflows(int64_t a, int64_t b, int64_t* r) { return __builtin_sub_overflow(a, b, r); }
bool mul_overflows(int64_t a, int64_t b, int64_t* r) { return __builtin_mul_overflow(a, b, r); }

int64_t floor_div(int64_t a, int64_t b) {
  RETNET_CHECK(b != 0, "integer division or modulo by zero");
  RETNET_CHECK(!(a == INT64_MIN && b == -1), "integer overflow");
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

}  // namespace

Value* Evaluator::Scope::find(const std::string& name) {
  for (Scope* s = this; s; s = s->parent.get())
    for (auto& [k, v] : s->vars)
      if (k == name) return &v;
  return nullptr;
}

void Evaluator::Scope::set(const std::string& name, Value v) {
  for (auto& [k, old] : vars)
    if (k == name) { old = std::move(v); return; }
  vars.emplace_back(name, std::move(v));
}

Evaluator::Evaluator(const Program& program) : program_(program) {}

std::string Evaluator::render(const nlohmann::ordered_json& context) {
  RETNET_CHECK(context.is_object(), "chat template {}: the variables must be a JSON object, got {}",
               program_.origin, context.type_name());
  auto globals = std::make_shared<Scope>();
  globals->vars = global_functions(program_.origin);
  scope_ = std::make_shared<Scope>();
  scope_->parent = globals;
  for (const auto& [k, v] : context.items()) scope_->set(k, Value::from_json(v));
  std::string out;
  out_ = &out;
  // Namespaces are the only containers a template can mutate, so the only way to a reference
  // cycle ({% set ns.self = ns %}); emptying them after the render frees everything.
  struct ClearNamespaces {
    std::vector<std::shared_ptr<Object>>& list;
    ~ClearNamespaces() {
      for (auto& ns : list) ns->entries.clear();
      list.clear();
    }
  } clear{namespaces_};
  try {
    exec(program_.body);
  } catch (const LocatedError&) {
    throw;
  } catch (const Error& e) {
    throw Error(fmt::format("chat template {}: {}", program_.origin, e.what()));
  }
  return out;
}

void Evaluator::track_namespace(std::shared_ptr<Object> ns) { namespaces_.push_back(std::move(ns)); }

void Evaluator::charge(int64_t units) {
  steps_ += units;
  if (steps_ > program_.limits.max_steps)
    throw LocatedError(fmt::format("chat template {}: rendering took more than {} steps (a runaway loop?)",
                                   program_.origin, program_.limits.max_steps));
}

void Evaluator::charge_bytes(size_t bytes) { charge(static_cast<int64_t>(bytes / 64) + 1); }

void Evaluator::check_size(size_t size, const char* what) {
  if (static_cast<int64_t>(size) > program_.limits.max_output_bytes)
    throw LocatedError(fmt::format("chat template {}: {} of {} would exceed the limit of {}",
                                   program_.origin, what, size, program_.limits.max_output_bytes));
}

void Evaluator::check_items(size_t items, const char* what) {
  const int64_t limit = std::max<int64_t>(1, program_.limits.max_output_bytes / 16);
  if (static_cast<int64_t>(items) > limit)
    throw LocatedError(fmt::format("chat template {}: {} of {} items would exceed the limit of {}",
                                   program_.origin, what, items, limit));
}

void Evaluator::fail(int line, int column, const std::string& what) const {
  throw LocatedError(fmt::format("chat template {}:{}:{}: {}", program_.origin, line, column, what));
}

void Evaluator::emit(const std::string& text) {
  check_size(out_->size() + text.size(), "the output");
  charge_bytes(static_cast<int64_t>(text.size()));
  out_->append(text);
}

void Evaluator::exec(const Body& body) {
  for (const auto& s : body) {
    exec_stmt(*s);
    if (flow_ != Flow::Normal) return;
  }
}

Evaluator::Nesting::Nesting(Evaluator& ev) : ev_(ev) {
  if (++ev_.nesting_ > ev_.program_.limits.max_nesting) {
    --ev_.nesting_;
    throw LocatedError(
        fmt::format("chat template {}: rendering nested deeper than {} levels "
                    "(statements, expressions and macro calls together)",
                    ev_.program_.origin, ev_.program_.limits.max_nesting));
  }
}

void Evaluator::exec_stmt(const Stmt& s) {
  charge(1);
  Nesting nesting(*this);
  try {
    switch (s.kind) {
      case Stmt::Kind::Text: emit(s.text); return;
      case Stmt::Kind::Output:
        emit(eval(*s.expr).to_display(max_bytes()));
        return;
      case Stmt::Kind::If:
        for (const auto& [cond, body] : s.branches)
          if (eval(*cond).truthy()) { exec(body); return; }
        exec(s.else_body);
        return;
      case Stmt::Kind::For: exec_for(s); return;
      case Stmt::Kind::Set: exec_set(s); return;
      case Stmt::Kind::SetBlock: {
        std::string captured;
        std::string* saved = out_;
        out_ = &captured;
        try { exec(s.body); } catch (...) { out_ = saved; throw; }
        out_ = saved;
        scope_->set(s.targets[0], Value::string(std::move(captured)));
        return;
      }
      case Stmt::Kind::Macro: scope_->set(s.text, make_macro(s)); return;
      case Stmt::Kind::Break:
      case Stmt::Kind::Continue:
        if (loop_depth_ == 0) fail(s.line, s.column, "'break' or 'continue' outside a for loop");
        flow_ = s.kind == Stmt::Kind::Break ? Flow::Break : Flow::Continue;
        return;
      case Stmt::Kind::Block: exec(s.body); return;
    }
  } catch (const LocatedError&) {
    throw;
  } catch (const Error& e) {
    fail(s.line, s.column, e.what());
  }
}

void Evaluator::bind_targets(Scope& scope, const std::vector<std::string>& targets, const Value& item) {
  if (targets.size() == 1) {
    scope.set(targets[0], item);
    return;
  }
  RETNET_CHECK(item.is_array() && item.items().size() == targets.size(),
               "cannot unpack a {} into {} loop variables", item.type_name(), targets.size());
  for (size_t i = 0; i < targets.size(); ++i) scope.set(targets[i], item.items()[i]);
}

void Evaluator::exec_for(const Stmt& s) {
  const Value iterable = eval(*s.expr);
  Array items = iteration_items(iterable);
  charge(static_cast<int64_t>(items.size()));
  auto loop_scope = std::make_shared<Scope>();
  loop_scope->parent = scope_;
  if (s.filter) {  // "for x in xs if cond": loop.length counts what passes
    Array kept;
    auto saved = scope_;
    scope_ = loop_scope;
    try {
      for (auto& item : items) {
        bind_targets(*loop_scope, s.targets, item);
        if (eval(*s.filter).truthy()) kept.push_back(std::move(item));
      }
    } catch (...) { scope_ = saved; throw; }
    scope_ = saved;
    items = std::move(kept);
  }
  if (items.empty()) {
    exec(s.else_body);
    return;
  }
  auto saved = scope_;
  ++loop_depth_;
  const auto n = static_cast<int64_t>(items.size());
  // One loop object for the whole loop, advanced in place, as Jinja's LoopContext is.
  auto loop = std::make_shared<Object>();
  for (const char* key : {"index", "index0", "revindex", "revindex0", "first", "last", "length", "previtem", "nextitem"})
    loop->entries.emplace_back(key, Value());
  const Value loop_value = Value::object(loop);
  try {
    for (int64_t i = 0; i < n; ++i) {
      charge(10);  // scope, bindings, loop variables: a loop that does nothing still costs
      // A fresh scope each iteration: a "set" in one does not leak into the next.
      scope_ = std::make_shared<Scope>();
      scope_->parent = saved;
      bind_targets(*scope_, s.targets, items[static_cast<size_t>(i)]);
      auto& e = loop->entries;
      e[0].second = Value::integer(i + 1);
      e[1].second = Value::integer(i);
      e[2].second = Value::integer(n - i);
      e[3].second = Value::integer(n - i - 1);
      e[4].second = Value::boolean(i == 0);
      e[5].second = Value::boolean(i == n - 1);
      e[6].second = Value::integer(n);
      e[7].second = i > 0 ? items[static_cast<size_t>(i - 1)] : Value();
      e[8].second = i + 1 < n ? items[static_cast<size_t>(i + 1)] : Value();
      scope_->set("loop", loop_value);
      exec(s.body);
      if (flow_ == Flow::Break) { flow_ = Flow::Normal; break; }
      flow_ = Flow::Normal;
    }
  } catch (...) {
    scope_ = saved;
    --loop_depth_;
    throw;
  }
  scope_ = saved;
  --loop_depth_;
}

void Evaluator::exec_set(const Stmt& s) {
  Value v = eval(*s.expr);
  if (!s.text.empty()) {  // set ns.attr = value
    Value* target = scope_->find(s.targets[0]);
    RETNET_CHECK(target && target->is_namespace(),
                 "cannot set '{}.{}': '{}' is not a namespace (only namespace() objects take attributes)",
                 s.targets[0], s.text, s.targets[0]);
    target->obj_mut().set(s.text, std::move(v));
    return;
  }
  bind_targets(*scope_, s.targets, v);
}

Value Evaluator::make_macro(const Stmt& s) {
  // Weak: the macro lives in the scope it captures, and a strong pointer would be a cycle.
  std::weak_ptr<Scope> defined_in = scope_;
  const Stmt* macro = &s;
  return Value::callable(s.text, [this, macro, defined_in](Evaluator&, CallArgs& args) {
    auto parent = defined_in.lock();
    RETNET_CHECK(parent, "macro '{}' was called after the loop that defined it ended", macro->text);
    RETNET_CHECK(args.positional.size() <= macro->params.size(), "macro '{}' takes {} arguments, got {}",
                 macro->text, macro->params.size(), args.positional.size());
    if (++depth_ > program_.limits.max_depth) {
      --depth_;
      throw Error(fmt::format("macro calls nested deeper than {} (runaway recursion?)", program_.limits.max_depth));
    }
    auto call_scope = std::make_shared<Scope>();
    call_scope->parent = parent;
    for (size_t i = 0; i < macro->params.size(); ++i) {
      const auto& [name, def] = macro->params[i];
      Value v = args.get(i, name);
      if (v.is_undefined() && def) v = eval(*def);
      call_scope->set(name, std::move(v));
    }
    for (const auto& [k, _] : args.keyword) {
      bool known = false;
      for (const auto& p : macro->params) known |= p.first == k;
      RETNET_CHECK(known, "macro '{}' has no parameter '{}'", macro->text, k);
    }
    std::string captured;
    auto saved_scope = scope_;
    std::string* saved_out = out_;
    const int saved_loops = loop_depth_;
    scope_ = call_scope;
    out_ = &captured;
    loop_depth_ = 0;
    auto restore = [&] {
      scope_ = saved_scope;
      out_ = saved_out;
      loop_depth_ = saved_loops;
      --depth_;
    };
    try { exec(macro->body); } catch (...) { restore(); throw; }
    restore();
    return Value::string(std::move(captured));
  });
}

Value Evaluator::call(const Value& callee, CallArgs& args) {
  RETNET_CHECK(callee.kind() == Value::Kind::Callable, "a {} is not callable", callee.type_name());
  return callee.function()(*this, args);
}

CallArgs Evaluator::eval_args(const Expr& e, size_t first) {
  CallArgs args;
  for (size_t i = first; i < e.args.size(); ++i) args.positional.push_back(eval(*e.args[i]));
  for (const auto& [k, v] : e.kwargs) args.keyword.emplace_back(k, eval(*v));
  return args;
}

Value Evaluator::eval(const Expr& e) {
  charge(1);
  Nesting nesting(*this);
  try {
    switch (e.kind) {
      case Expr::Kind::Literal: return e.value;
      case Expr::Kind::Name: {
        const Value* v = scope_->find(e.name);
        return v ? *v : Value();
      }
      case Expr::Kind::List: {
        Array items;
        for (const auto& a : e.args) items.push_back(eval(*a));
        return Value::array(std::move(items));
      }
      case Expr::Kind::Dict: {
        auto o = std::make_shared<Object>();
        for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
          const Value k = eval(*e.args[i]);
          RETNET_CHECK(k.is_string(), "dict keys must be strings here, got a {}", k.type_name());
          o->set(k.str(), eval(*e.args[i + 1]));
        }
        return Value::object(std::move(o));
      }
      case Expr::Kind::Attr: return eval_attr(e, eval(*e.args[0]), e.name);
      case Expr::Kind::Index: return eval_index(e, eval(*e.args[0]), eval(*e.args[1]));
      case Expr::Kind::Slice: return eval_slice(e, eval(*e.args[0]));
      case Expr::Kind::Call: {
        const Value callee = eval(*e.args[0]);
        if (callee.is_undefined()) {
          const std::string what = e.args[0]->kind == Expr::Kind::Name ? "'" + e.args[0]->name + "'"
                                   : e.args[0]->kind == Expr::Kind::Attr ? "'" + e.args[0]->name + "'" : "the callee";
          throw Error(what + " is undefined: not a function or method this engine knows");
        }
        CallArgs args = eval_args(e, 1);
        return call(callee, args);
      }
      case Expr::Kind::Filter: {
        const Value input = eval(*e.args[0]);
        CallArgs args = eval_args(e, 1);
        return apply_filter(*this, e.name, input, args);
      }
      case Expr::Kind::Test: {
        const Value input = eval(*e.args[0]);
        CallArgs args = eval_args(e, 1);
        return Value::boolean(apply_test(*this, e.name, input, args) != e.negated);
      }
      case Expr::Kind::Unary: {
        const Value v = eval(*e.args[0]);
        if (e.name == "not") return Value::boolean(!v.truthy());
        RETNET_CHECK(v.is_number(), "bad operand type for unary {}: a {}", e.name, v.type_name());
        if (e.name == "+") return v.is_int() ? Value::integer(v.as_int()) : v;
        if (v.is_int()) return Value::integer(checked(sub_overflows, 0, v.as_int()));
        return Value::number(-v.as_double());
      }
      case Expr::Kind::Binary: return eval_binary(e);
      case Expr::Kind::Cond:
        if (eval(*e.args[0]).truthy()) return eval(*e.args[1]);
        return e.args[2] ? eval(*e.args[2]) : Value();
    }
  } catch (const LocatedError&) {
    throw;
  } catch (const Error& ex) {
    fail(e.line, e.column, ex.what());
  }
  return Value();
}

Value Evaluator::eval_attr(const Expr& e, const Value& obj, const std::string& name) {
  if (obj.is_undefined()) {
    const std::string what = e.args[0]->kind == Expr::Kind::Name ? "'" + e.args[0]->name + "'" : "the value";
    throw Error(fmt::format("{} is undefined (reading its attribute '{}')", what, name));
  }
  if (obj.is_object()) {
    if (!obj.is_namespace()) {
      Value m = bound_method(obj, name);  // Jinja: d.items is the method, d['items'] the item
      if (!m.is_undefined()) return m;
    }
    const Value* v = obj.obj().find(name);
    return v ? *v : Value();
  }
  if (obj.is_array() && !name.empty() && name[0] >= '0' && name[0] <= '9')  // xs.0
    return eval_index(e, obj, Value::integer(std::stoll(name)));
  return bound_method(obj, name);
}

Value Evaluator::eval_index(const Expr& e, const Value& obj, const Value& index) {
  if (obj.is_undefined()) {
    const std::string what = e.args[0]->kind == Expr::Kind::Name ? "'" + e.args[0]->name + "'" : "the value";
    throw Error(fmt::format("{} is undefined (reading an item of it)", what));
  }
  if (obj.is_object()) {
    RETNET_CHECK(index.is_string(), "dict keys are strings, got a {} subscript", index.type_name());
    const Value* v = obj.obj().find(index.str());
    if (v) return *v;
    return obj.is_namespace() ? Value() : bound_method(obj, index.str());
  }
  if (obj.is_array() || obj.is_string()) {
    RETNET_CHECK(index.is_int(), "{} indices must be integers, got a {}", obj.type_name(), index.type_name());
    std::vector<std::string> chars;
    if (obj.is_string()) chars = split_code_points(obj.str());
    const auto n = static_cast<int64_t>(obj.is_array() ? obj.items().size() : chars.size());
    int64_t i = index.as_int();
    if (i < 0) i += n;
    if (i < 0 || i >= n) return Value();  // Jinja: undefined, not an error
    return obj.is_array() ? obj.items()[static_cast<size_t>(i)] : Value::string(chars[static_cast<size_t>(i)]);
  }
  if (obj.is_none()) return Value();
  throw Error(fmt::format("a {} cannot be subscripted", obj.type_name()));
}

Value Evaluator::eval_slice(const Expr& e, const Value& obj) {
  RETNET_CHECK(obj.is_array() || obj.is_string(), "a {} cannot be sliced", obj.type_name());
  int64_t bound[3] = {0, 0, 1};
  bool given[3] = {false, false, false};
  for (int k = 0; k < 3; ++k) {
    if (!e.args[static_cast<size_t>(k + 1)]) continue;
    const Value v = eval(*e.args[static_cast<size_t>(k + 1)]);
    if (v.is_none()) continue;
    RETNET_CHECK(v.is_int(), "slice indices must be integers or None, got a {}", v.type_name());
    bound[k] = v.as_int();
    given[k] = true;
  }
  const int64_t step = bound[2];
  RETNET_CHECK(step != 0, "slice step cannot be zero");
  std::vector<std::string> chars;
  if (obj.is_string()) chars = split_code_points(obj.str());
  const auto n = static_cast<int64_t>(obj.is_array() ? obj.items().size() : chars.size());
  // Python's slice.indices().
  auto clamp = [&](int64_t v, bool is_given, int64_t def) {
    if (!is_given) return def;
    if (v < 0) v += n;
    if (step > 0) return std::min(std::max<int64_t>(v, 0), n);
    return std::min(std::max<int64_t>(v, -1), n - 1);
  };
  const int64_t start = clamp(bound[0], given[0], step > 0 ? 0 : n - 1);
  const int64_t stop = clamp(bound[1], given[1], step > 0 ? n : -1);
  Array items;
  std::string text;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
    if (obj.is_array()) items.push_back(obj.items()[static_cast<size_t>(i)]);
    else text += chars[static_cast<size_t>(i)];
  }
  charge_bytes(static_cast<size_t>(n));
  return obj.is_array() ? Value::array(std::move(items)) : Value::string(std::move(text));
}

Value Evaluator::eval_binary(const Expr& e) {
  const std::string& op = e.name;
  if (op == "and" || op == "or") {  // Python: the deciding operand itself
    Value left = eval(*e.args[0]);
    if (left.truthy() == (op == "or")) return left;
    return eval(*e.args[1]);
  }
  const Value a = eval(*e.args[0]);
  const Value b = eval(*e.args[1]);
  if (op == "==") return Value::boolean(values_equal(a, b));
  if (op == "!=") return Value::boolean(!values_equal(a, b));
  if (op == "<") return Value::boolean(compare_values(a, b) < 0);
  if (op == "<=") return Value::boolean(compare_values(a, b) <= 0);
  if (op == ">") return Value::boolean(compare_values(a, b) > 0);
  if (op == ">=") return Value::boolean(compare_values(a, b) >= 0);
  if (op == "in" || op == "not in") {
    bool found = false;
    if (b.is_string()) {
      RETNET_CHECK(a.is_string(), "'in <string>' needs a string on the left, got a {}", a.type_name());
      found = b.str().find(a.str()) != std::string::npos;
    } else if (b.is_object()) {
      found = a.is_string() && b.obj().find(a.str()) != nullptr;
    } else if (b.is_array()) {
      for (const auto& item : b.items())
        if (values_equal(a, item)) { found = true; break; }
      charge(static_cast<int64_t>(b.items().size()));
    } else if (!b.is_undefined()) {
      throw Error(fmt::format("argument of type '{}' is not iterable", b.type_name()));
    }
    return Value::boolean(found == (op == "in"));
  }
  if (op == "~") {
    std::string s = a.to_display(max_bytes());
    const std::string t = b.to_display(max_bytes());
    check_size(s.size() + t.size(), "a string");
    charge_bytes(s.size() + t.size());
    return Value::string(s + t);
  }
  if (op == "+") {
    if (a.is_string() && b.is_string()) {
      check_size(a.str().size() + b.str().size(), "a string");
      charge_bytes(a.str().size() + b.str().size());
      return Value::string(a.str() + b.str());
    }
    if (a.is_array() && b.is_array()) {
      check_items(a.items().size() + b.items().size(), "a list");
      charge(static_cast<int64_t>(a.items().size() + b.items().size()));
      Array items = a.items();
      items.insert(items.end(), b.items().begin(), b.items().end());
      return Value::array(std::move(items));
    }
  }
  if (op == "*" && ((a.is_string() && b.is_int()) || (a.is_int() && b.is_string()))) {
    const std::string& s = a.is_string() ? a.str() : b.str();
    const int64_t times = std::max<int64_t>(0, a.is_string() ? b.as_int() : a.as_int());
    RETNET_CHECK(s.empty() || times <= program_.limits.max_output_bytes, "string repeated {} times", times);
    check_size(s.size() * static_cast<size_t>(times), "a string");
    charge_bytes(s.size() * static_cast<size_t>(times));
    std::string out;
    for (int64_t i = 0; i < times; ++i) out += s;
    return Value::string(std::move(out));
  }
  RETNET_CHECK(a.is_number() && b.is_number(), "unsupported operand types for {}: {} and {}", op,
               a.type_name(), b.type_name());
  const bool ints = a.is_int() && b.is_int();
  const int64_t x = a.as_int(), y = b.as_int();
  if (op == "+") return ints ? Value::integer(checked(add_overflows, x, y)) : Value::number(a.as_double() + b.as_double());
  if (op == "-") return ints ? Value::integer(checked(sub_overflows, x, y)) : Value::number(a.as_double() - b.as_double());
  if (op == "*") return ints ? Value::integer(checked(mul_overflows, x, y)) : Value::number(a.as_double() * b.as_double());
  if (op == "/") {
    RETNET_CHECK(b.as_double() != 0, "division by zero");
    return Value::number(a.as_double() / b.as_double());
  }
  if (op == "//") {
    if (ints) return Value::integer(floor_div(x, y));
    RETNET_CHECK(b.as_double() != 0, "float floor division by zero");
    return Value::number(std::floor(a.as_double() / b.as_double()));
  }
  if (op == "%") {
    if (ints) return Value::integer(x - floor_div(x, y) * y);
    RETNET_CHECK(b.as_double() != 0, "float modulo by zero");
    const double m = std::fmod(a.as_double(), b.as_double());
    return Value::number(m != 0 && ((m < 0) != (b.as_double() < 0)) ? m + b.as_double() : m);
  }
  if (op == "**") {
    if (ints && y >= 0) {
      int64_t acc = 1;
      for (int64_t i = 0; i < y && acc != 0 && !(acc == 1 && (x == 1)); ++i) {
        acc = checked(mul_overflows, acc, x);
        charge(1);
      }
      return Value::integer(acc);
    }
    return Value::number(std::pow(a.as_double(), b.as_double()));
  }
  throw Error("unknown operator " + op);
}

}  // namespace retnet::chat_template_detail
