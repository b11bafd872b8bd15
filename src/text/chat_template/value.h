#pragma once
// The values a chat template computes with: Python's types as Jinja exposes them (undefined, None,
// bool, int, float, str, list, dict, namespace, callable). Lists, dicts and namespaces are shared
// by reference, as in Python; strings are shared immutable UTF-8.
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

namespace retnet::chat_template_detail {

class Value;
class Evaluator;
// Lists and dicts nest at most this deep: printing, comparing and freeing them recurse.
constexpr int kMaxValueDepth = 256;
using Array = std::vector<Value>;
struct Object;
// Positional and keyword arguments of a call.
struct CallArgs;
using Function = std::function<Value(Evaluator&, CallArgs&)>;

class Value {
 public:
  enum class Kind { Undefined, None, Bool, Int, Float, String, Array, Object, Callable };

  Value() = default;  // undefined
  static Value none() { return Value(Kind::None); }
  static Value boolean(bool b) { Value v(Kind::Bool); v.int_ = b; return v; }
  static Value integer(int64_t i) { Value v(Kind::Int); v.int_ = i; return v; }
  static Value number(double d) { Value v(Kind::Float); v.float_ = d; return v; }
  static Value string(std::string s);
  static Value array(Array items);
  static Value object(std::shared_ptr<Object> o);
  static Value callable(std::string name, Function f);
  static Value from_json(const nlohmann::ordered_json& j);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::Undefined; }
  bool is_none() const { return kind_ == Kind::None; }
  bool is_string() const { return kind_ == Kind::String; }
  bool is_int() const { return kind_ == Kind::Int || kind_ == Kind::Bool; }
  bool is_number() const { return is_int() || kind_ == Kind::Float; }
  bool is_array() const { return kind_ == Kind::Array; }
  bool is_object() const { return kind_ == Kind::Object; }
  bool is_namespace() const;

  bool as_bool() const { return int_ != 0; }
  int64_t as_int() const { return int_; }
  double as_double() const { return kind_ == Kind::Float ? float_ : static_cast<double>(int_); }
  const std::string& str() const { return *string_; }
  const Array& items() const { return *array_; }
  Array& items_mut() { return *array_; }
  const Object& obj() const { return *object_; }
  Object& obj_mut() { return *object_; }
  const std::shared_ptr<Object>& obj_ptr() const { return object_; }
  const std::string& callable_name() const { return *string_; }
  const Function& function() const { return *function_; }

  bool truthy() const;
  // Python's str(): what {{ value }} prints; an Error past `max_bytes` (a list holding the same
  // list twice, n times over, prints 2^n items) or past kMaxValueDepth levels (a namespace that
  // holds itself).
  std::string to_display(size_t max_bytes) const;
  // Python's repr(), used inside printed lists and dicts.
  std::string to_repr(size_t max_bytes) const;
  // Levels of lists and dicts inside this value (0 for a scalar), as built.
  int depth() const { return depth_; }
  // A Python type name, for messages.
  const char* type_name() const;

 private:
  explicit Value(Kind k) : kind_(k) {}
  Kind kind_ = Kind::Undefined;
  int depth_ = 0;
  int64_t int_ = 0;
  double float_ = 0;
  std::shared_ptr<const std::string> string_;
  std::shared_ptr<Array> array_;
  std::shared_ptr<Object> object_;
  std::shared_ptr<const Function> function_;
};

// A dict in insertion order (Python 3.7+), small enough in chat templates for linear lookup.
struct Object {
  std::vector<std::pair<std::string, Value>> entries;
  bool is_namespace = false;
  const Value* find(const std::string& key) const;
  void set(const std::string& key, Value v);
};

struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
  // The i-th positional argument or the keyword `name`, undefined when neither was given.
  Value get(size_t i, const std::string& name) const;
};

// Python's equality and ordering (numbers across int/float/bool; strings; lists elementwise).
// Both are Errors past a fixed number of items visited, so shared sublists cannot make them hang.
bool values_equal(const Value& a, const Value& b);
// <0, 0, >0; throws Error when the two cannot be ordered.
int compare_values(const Value& a, const Value& b);
// Python's repr of a float ("1.0", "0.1", "1e+20").
std::string format_float(double d);
// json.dumps(value, ensure_ascii=False, indent=indent, sort_keys=...) with Python's separators;
// indent < 0 is None (one line). An Error past `max_bytes` of output.
std::string to_json(const Value& v, int64_t indent, bool sort_keys, size_t max_bytes);

// Python's iteration: list items, dict keys, string characters; undefined is empty. Anything else
// is an Error, prefixed with `context` (a filter's name) when given.
Array iteration_items(const Value& v, const std::string& context = "");
// Code points of UTF-8 text (invalid bytes count as one each), for Python's str semantics.
std::vector<std::string> split_code_points(const std::string& s);
size_t count_code_points(const std::string& s);

}  // namespace retnet::chat_template_detail
