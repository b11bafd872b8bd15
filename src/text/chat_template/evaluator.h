#pragma once
// Renders a parsed template: scopes, statements, expressions, macros, and the budget that keeps
// a hostile template from hanging or exhausting memory.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "ast.h"
#include "value.h"

namespace retnet::chat_template_detail {

class Evaluator {
 public:
  explicit Evaluator(const Program& program);
  std::string render(const nlohmann::ordered_json& context);

  // Counts `units` of work against the step budget: a node evaluated or a list item copied is
  // one, a loop iteration ten.
  void charge(int64_t units);
  // Copying bytes is cheap next to evaluating a node: 64 bytes count as one step.
  void charge_bytes(size_t bytes);
  // A string or list of `size` bytes/items may be built: within the output limit (charges
  // nothing; the caller charges what it copies).
  void check_size(size_t size, const char* what);
  // A list of `items` values may be built: at most max_output_bytes / 16 of them (a value takes
  // about 90 bytes, so this bounds memory near the output limit's scale).
  void check_items(size_t items, const char* what);
  // Calls a function value (a builtin, a bound method or a macro).
  Value call(const Value& callee, CallArgs& args);
  const Program& program() const { return program_; }
  // The largest string a render may build (max_output_bytes).
  size_t max_bytes() const { return static_cast<size_t>(program_.limits.max_output_bytes); }
  // A namespace() made by this render, emptied when the render ends.
  void track_namespace(std::shared_ptr<Object> ns);

 private:
  struct Scope {
    std::vector<std::pair<std::string, Value>> vars;
    std::shared_ptr<Scope> parent;
    Value* find(const std::string& name);
    void set(const std::string& name, Value v);
  };
  enum class Flow { Normal, Break, Continue };

  void exec(const Body& body);
  void exec_stmt(const Stmt& s);
  void exec_for(const Stmt& s);
  void exec_set(const Stmt& s);
  Value make_macro(const Stmt& s);
  Value eval(const Expr& e);
  Value eval_binary(const Expr& e);
  Value eval_attr(const Expr& e, const Value& obj, const std::string& name);
  Value eval_index(const Expr& e, const Value& obj, const Value& index);
  Value eval_slice(const Expr& e, const Value& obj);
  CallArgs eval_args(const Expr& e, size_t first);
  void emit(const std::string& text);
  void bind_targets(Scope& scope, const std::vector<std::string>& targets, const Value& item);
  [[noreturn]] void fail(int line, int column, const std::string& what) const;
  // Counts one open level of statements, expressions and macro calls against max_nesting.
  struct Nesting {
    explicit Nesting(Evaluator& ev);
    ~Nesting() { --ev_.nesting_; }
    Evaluator& ev_;
  };

  const Program& program_;
  std::shared_ptr<Scope> scope_;
  std::string* out_ = nullptr;
  Flow flow_ = Flow::Normal;
  int64_t steps_ = 0;
  int depth_ = 0;
  int nesting_ = 0;
  int loop_depth_ = 0;
  std::vector<std::shared_ptr<Object>> namespaces_;
};

}  // namespace retnet::chat_template_detail
