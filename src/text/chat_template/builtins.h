#pragma once
// What templates call: filters ("x | join(', ')"), tests ("x is defined"), methods of strings and
// dicts ("s.strip()", "d.items()"), and the global functions (range, namespace,
// raise_exception, strftime_now, dict).
#include <string>
#include <utility>
#include <vector>

#include "value.h"

namespace retnet::chat_template_detail {

class Evaluator;

// Throws Error "unknown filter 'x'" or a message naming the filter and the bad argument.
Value apply_filter(Evaluator& ev, const std::string& name, const Value& input, CallArgs& args);
bool apply_test(Evaluator& ev, const std::string& name, const Value& input, CallArgs& args);
// A method of a str, dict or list bound to it, or undefined when there is none by that name.
Value bound_method(const Value& self, const std::string& name);
// The global functions, set in the outermost scope of every render.
std::vector<std::pair<std::string, Value>> global_functions(const std::string& origin);

}  // namespace retnet::chat_template_detail
