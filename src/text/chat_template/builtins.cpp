// Filters, tests, methods and global functions, with Python's and Jinja's semantics for what
// chat templates use. Strings are UTF-8; case mapping is ASCII-only.
#include "builtins.h"

#include <algorithm>
#include <cmath>
#include <ctime>

#include "evaluator.h"
#include "stable_sort.h"
#include "retnet/core/error.h"

namespace retnet::chat_template_detail {
namespace {

const char* const kSpace = " \t\n\r\v\f";

std::string strip(const std::string& s, const Value& chars, bool left, bool right) {
  const std::string set = chars.is_string() ? chars.str() : kSpace;
  size_t b = 0, e = s.size();
  if (left) while (b < e && set.find(s[b]) != std::string::npos) ++b;
  if (right) while (e > b && set.find(s[e - 1]) != std::string::npos) --e;
  return s.substr(b, e - b);
}

std::string ascii_case(std::string s, bool upper) {
  for (char& c : s) {
    if (upper && c >= 'a' && c <= 'z') c = static_cast<char>(c - 32);
    if (!upper && c >= 'A' && c <= 'Z') c = static_cast<char>(c + 32);
  }
  return s;
}
bool is_alpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (static_cast<unsigned char>(c) >= 0x80); }

// Python's str.title(): the first letter of every run of letters upper case, the rest lower.
std::string title(const std::string& s) {
  std::string out = s;
  bool prev_letter = false;
  for (char& c : out) {
    const bool letter = is_alpha(c);
    if (letter && static_cast<unsigned char>(c) < 0x80) c = prev_letter ? ascii_case(std::string(1, c), false)[0] : ascii_case(std::string(1, c), true)[0];
    prev_letter = letter;
  }
  return out;
}

std::string capitalize(const std::string& s) {
  std::string out = ascii_case(s, false);
  if (!out.empty()) out[0] = ascii_case(out.substr(0, 1), true)[0];
  return out;
}

Value split(const std::string& s, const Value& sep, const Value& maxsplit_v) {
  const int64_t maxsplit = maxsplit_v.is_int() ? maxsplit_v.as_int() : -1;
  Array parts;
  if (sep.is_undefined() || sep.is_none()) {  // runs of whitespace, ends ignored
    size_t i = s.find_first_not_of(kSpace);
    while (i != std::string::npos) {
      if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit) {
        parts.push_back(Value::string(strip(s.substr(i), Value(), false, true)));
        break;
      }
      const size_t j = s.find_first_of(kSpace, i);
      parts.push_back(Value::string(s.substr(i, j == std::string::npos ? std::string::npos : j - i)));
      i = j == std::string::npos ? j : s.find_first_not_of(kSpace, j);
    }
    return Value::array(std::move(parts));
  }
  RETNET_CHECK(sep.is_string(), "split(): the separator must be a string, got a {}", sep.type_name());
  RETNET_CHECK(!sep.str().empty(), "split(): empty separator");
  size_t i = 0;
  while (true) {
    const size_t j = s.find(sep.str(), i);
    if (j == std::string::npos || (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit)) {
      parts.push_back(Value::string(s.substr(i)));
      break;
    }
    parts.push_back(Value::string(s.substr(i, j - i)));
    i = j + sep.str().size();
  }
  return Value::array(std::move(parts));
}

std::string replace(Evaluator& ev, const std::string& s, const std::string& from, const std::string& to, int64_t count) {
  std::string out;
  size_t i = 0;
  int64_t done = 0;
  if (from.empty()) {  // Python inserts `to` around every character
    const auto chars = split_code_points(s);
    ev.check_size(s.size() + to.size() * (chars.size() + 1), "a string");
    for (const auto& c : chars) {
      if (count < 0 || done++ < count) out += to;
      out += c;
    }
    if (count < 0 || done < count) out += to;
    return out;
  }
  while (count < 0 || done < count) {
    const size_t j = s.find(from, i);
    if (j == std::string::npos) break;
    out.append(s, i, j - i);
    out += to;
    ev.check_size(out.size(), "a string");
    ev.charge_bytes(j - i + to.size());
    i = j + from.size();
    ++done;
  }
  out.append(s, i, std::string::npos);
  return out;
}

bool prefix_match(const std::string& s, const Value& what, bool at_start) {
  auto one = [&](const Value& p) {
    RETNET_CHECK(p.is_string(), "{}(): expects a string or a list of strings, got a {}",
                 at_start ? "startswith" : "endswith", p.type_name());
    const std::string& t = p.str();
    return t.size() <= s.size() && (at_start ? s.compare(0, t.size(), t) == 0 : s.compare(s.size() - t.size(), t.size(), t) == 0);
  };
  if (what.is_array()) return std::any_of(what.items().begin(), what.items().end(), one);
  return one(what);
}


// Jinja's attribute lookup for filters' attribute= arguments: "a.b" walks, digits index lists.
Value attribute_of(const Value& item, const std::string& path) {
  Value v = item;
  size_t i = 0;
  while (i <= path.size()) {
    const size_t j = std::min(path.find('.', i), path.size());
    const std::string part = path.substr(i, j - i);
    if (v.is_object()) {
      const Value* f = v.obj().find(part);
      v = f ? *f : Value();
    } else if (v.is_array() && !part.empty() && std::all_of(part.begin(), part.end(), ::isdigit)) {
      const auto k = std::stoull(part);
      v = k < v.items().size() ? v.items()[k] : Value();
    } else {
      return Value();
    }
    i = j + 1;
  }
  return v;
}

// The arguments after the test name in select/reject(test, args...) and selectattr(attr, test, ...).
bool run_test(Evaluator& ev, const Value& v, const CallArgs& args, size_t test_at) {
  if (args.positional.size() <= test_at) return v.truthy();
  RETNET_CHECK(args.positional[test_at].is_string(), "the test name must be a string");
  CallArgs rest;
  rest.positional.assign(args.positional.begin() + static_cast<std::ptrdiff_t>(test_at + 1), args.positional.end());
  return apply_test(ev, args.positional[test_at].str(), v, rest);
}

std::string html_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

}  // namespace

Value apply_filter(Evaluator& ev, const std::string& name, const Value& in, CallArgs& args) {
  const auto arg = [&](size_t i, const char* key) { return args.get(i, key); };
  const auto need_string = [&]() -> const std::string& {
    RETNET_CHECK(in.is_string(), "filter '{}' expects a string, got a {}", name, in.type_name());
    return in.str();
  };
  if (name == "trim") return Value::string(strip(need_string(), arg(0, "chars"), true, true));
  if (name == "upper") return Value::string(ascii_case(need_string(), true));
  if (name == "lower") return Value::string(ascii_case(need_string(), false));
  if (name == "title") return Value::string(title(need_string()));
  if (name == "capitalize") return Value::string(capitalize(need_string()));
  if (name == "safe") return in;
  if (name == "e" || name == "escape")
    return Value::string(html_escape(in.to_display(ev.max_bytes())));
  if (name == "string") return Value::string(in.to_display(ev.max_bytes()));
  if (name == "length" || name == "count") {
    if (in.is_string()) return Value::integer(static_cast<int64_t>(count_code_points(in.str())));
    if (in.is_array()) return Value::integer(static_cast<int64_t>(in.items().size()));
    if (in.is_object()) return Value::integer(static_cast<int64_t>(in.obj().entries.size()));
    if (in.is_undefined()) return Value::integer(0);
    throw Error(fmt::format("filter 'length': a {} has no length", in.type_name()));
  }
  if (name == "tojson") {
    const Value indent = arg(0, "indent");
    const Value sort = arg(1, "sort_keys");
    RETNET_CHECK(indent.is_int() || indent.is_none() || indent.is_undefined(),
                 "filter 'tojson': indent must be an integer or None, got a {}",
                 indent.type_name());
    // Python: a negative indent inserts newlines only, as 0 does; None keeps one line.
    const int64_t width = indent.is_int() ? std::max<int64_t>(0, indent.as_int()) : -1;
    std::string s = to_json(in, width, sort.truthy(), ev.max_bytes());
    ev.check_size(s.size(), "tojson's output");
    ev.charge_bytes(s.size());
    return Value::string(std::move(s));
  }
  if (name == "join") {
    const Value sep = arg(0, "d");
    const Value attribute = arg(1, "attribute");
    std::string out;
    bool first = true;
    for (const auto& item : iteration_items(in, "join")) {
      if (!first) out += sep.is_string() ? sep.str() : "";
      first = false;
      const std::string piece = (attribute.is_string() ? attribute_of(item, attribute.str()) : item)
                                    .to_display(ev.max_bytes());
      out += piece;
      ev.check_size(out.size(), "join's output");
      ev.charge_bytes(piece.size());
    }
    return Value::string(std::move(out));
  }
  if (name == "default" || name == "d") {
    const bool boolean = arg(1, "boolean").truthy();
    if (in.is_undefined() || (boolean && !in.truthy())) {
      const Value def = arg(0, "default_value");
      return def.is_undefined() ? Value::string("") : def;
    }
    return in;
  }
  if (name == "first" || name == "last") {
    const Array items = iteration_items(in, name);
    if (items.empty()) return Value();
    return name == "first" ? items.front() : items.back();
  }
  if (name == "list") return Value::array(iteration_items(in, "list"));
  if (name == "items" || name == "dictsort") {
    if (in.is_undefined()) return Value::array({});
    RETNET_CHECK(in.is_object(), "filter '{}' expects a dict, got a {}", name, in.type_name());
    Array pairs;
    for (const auto& [k, v] : in.obj().entries) pairs.push_back(Value::array({Value::string(k), v}));
    if (name == "dictsort")
      stable_sort_values(pairs, [](const Value& a, const Value& b) { return a.items()[0].str() < b.items()[0].str(); });
    return Value::array(std::move(pairs));
  }
  if (name == "reverse") {
    if (in.is_string()) {
      auto chars = split_code_points(in.str());
      std::string out;
      for (auto it = chars.rbegin(); it != chars.rend(); ++it) out += *it;
      return Value::string(std::move(out));
    }
    Array items = iteration_items(in, "reverse");
    std::reverse(items.begin(), items.end());
    return Value::array(std::move(items));
  }
  if (name == "unique") {
    Array out;
    for (const auto& item : iteration_items(in, "unique")) {
      bool seen = false;
      for (const auto& o : out) seen |= values_equal(o, item);
      if (!seen) out.push_back(item);
      ev.charge(static_cast<int64_t>(out.size()));
    }
    return Value::array(std::move(out));
  }
  if (name == "sort") {
    Array items = iteration_items(in, "sort");
    const bool reverse = arg(0, "reverse").truthy();
    const Value attribute = arg(2, "attribute");
    auto key = [&](const Value& v) { return attribute.is_string() ? attribute_of(v, attribute.str()) : v; };
    stable_sort_values(items, [&](const Value& a, const Value& b) {
      const int c = compare_values(key(a), key(b));
      return reverse ? c > 0 : c < 0;
    });
    return Value::array(std::move(items));
  }
  if (name == "sum" || name == "min" || name == "max") {
    const Array items = iteration_items(in, name);
    if (name == "sum") {
      Value total = Value::integer(0);
      for (const auto& v : items) {
        RETNET_CHECK(v.is_number(), "filter 'sum' expects numbers, got a {}", v.type_name());
        total = total.is_int() && v.is_int() ? Value::integer(total.as_int() + v.as_int()) : Value::number(total.as_double() + v.as_double());
      }
      return total;
    }
    if (items.empty()) return Value();
    Value best = items[0];
    for (const auto& v : items)
      if ((compare_values(v, best) < 0) == (name == "min") && !values_equal(v, best)) best = v;
    return best;
  }
  if (name == "int") {
    if (in.is_int()) return Value::integer(in.as_int());
    if (in.kind() == Value::Kind::Float) return Value::integer(static_cast<int64_t>(in.as_double()));
    if (in.is_string()) {
      try { return Value::integer(std::stoll(strip(in.str(), Value(), true, true))); } catch (...) {}
    }
    const Value def = arg(0, "default");
    return def.is_undefined() ? Value::integer(0) : def;
  }
  if (name == "float") {
    if (in.is_number()) return Value::number(in.as_double());
    if (in.is_string()) {
      try { return Value::number(std::stod(strip(in.str(), Value(), true, true))); } catch (...) {}
    }
    const Value def = arg(0, "default");
    return def.is_undefined() ? Value::number(0) : def;
  }
  if (name == "abs") {
    RETNET_CHECK(in.is_number(), "filter 'abs' expects a number, got a {}", in.type_name());
    return in.is_int() ? Value::integer(std::llabs(in.as_int())) : Value::number(std::fabs(in.as_double()));
  }
  if (name == "round") {
    RETNET_CHECK(in.is_number(), "filter 'round' expects a number, got a {}", in.type_name());
    const Value precision = arg(0, "precision");
    const double scale = std::pow(10.0, precision.is_int() ? static_cast<double>(precision.as_int()) : 0.0);
    return Value::number(std::round(in.as_double() * scale) / scale);
  }
  if (name == "indent") {
    const Value width_v = arg(0, "width");
    RETNET_CHECK(width_v.is_string() || width_v.is_int() || width_v.is_undefined(),
                 "filter 'indent': width must be an integer or a string, got a {}",
                 width_v.type_name());
    const int64_t width = width_v.is_int() ? std::max<int64_t>(0, width_v.as_int()) : 4;
    if (!width_v.is_string()) ev.check_size(static_cast<size_t>(width), "indent's width");
    const std::string pad =
        width_v.is_string() ? width_v.str() : std::string(static_cast<size_t>(width), ' ');
    const bool first = arg(1, "first").truthy(), blank = arg(2, "blank").truthy();
    const std::string& s = need_string();
    std::string out;
    size_t i = 0;
    bool first_line = true;
    while (i <= s.size()) {
      const size_t j = std::min(s.find('\n', i), s.size());
      const std::string line = s.substr(i, j - i);
      if ((first_line ? first : true) && (blank || !line.empty())) out += pad;
      out += line;
      if (j < s.size()) out += '\n';
      first_line = false;
      i = j + 1;
      ev.check_size(out.size(), "indent's output");
      ev.charge_bytes(line.size() + pad.size());
    }
    return Value::string(std::move(out));
  }
  if (name == "map") {
    const Value attribute = arg(static_cast<size_t>(-1), "attribute");
    Array out;
    for (const auto& item : iteration_items(in, "map")) {
      if (attribute.is_string()) {
        Value v = attribute_of(item, attribute.str());
        if (v.is_undefined()) {
          const Value def = args.get(static_cast<size_t>(-1), "default");
          if (!def.is_undefined()) v = def;
        }
        out.push_back(std::move(v));
      } else {
        RETNET_CHECK(!args.positional.empty() && args.positional[0].is_string(),
                     "filter 'map' needs attribute=NAME or a filter name");
        CallArgs rest;
        rest.positional.assign(args.positional.begin() + 1, args.positional.end());
        out.push_back(apply_filter(ev, args.positional[0].str(), item, rest));
      }
    }
    return Value::array(std::move(out));
  }
  if (name == "select" || name == "reject" || name == "selectattr" || name == "rejectattr") {
    const bool by_attr = name.size() > 6;
    const bool keep_if = name[0] == 's';
    if (by_attr) RETNET_CHECK(!args.positional.empty() && args.positional[0].is_string(), "filter '{}' needs an attribute name", name);
    Array out;
    for (const auto& item : iteration_items(in, name)) {
      const Value v = by_attr ? attribute_of(item, args.positional[0].str()) : item;
      if (run_test(ev, v, args, by_attr ? 1 : 0) == keep_if) out.push_back(item);
    }
    return Value::array(std::move(out));
  }
  if (name == "batch") {
    const Value size_v = arg(0, "linecount");
    RETNET_CHECK(size_v.is_int() && size_v.as_int() > 0, "filter 'batch' needs a positive size");
    Array out, cur;
    for (const auto& item : iteration_items(in, "batch")) {
      cur.push_back(item);
      if (static_cast<int64_t>(cur.size()) == size_v.as_int()) out.push_back(Value::array(std::move(cur))), cur.clear();
    }
    if (!cur.empty()) out.push_back(Value::array(std::move(cur)));
    return Value::array(std::move(out));
  }
  if (name == "replace") {
    const Value from = arg(0, "old"), to = arg(1, "new"), count = arg(2, "count");
    RETNET_CHECK(from.is_string() && to.is_string(), "filter 'replace' needs two strings");
    return Value::string(replace(ev, in.to_display(ev.max_bytes()), from.str(), to.str(),
                                 count.is_int() ? count.as_int() : -1));
  }
  throw Error(fmt::format("unknown filter '{}'", name));
}

bool apply_test(Evaluator& ev, const std::string& name, const Value& v, CallArgs& args) {
  (void)ev;
  const Value other = args.get(0, "value");
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "string") return v.is_string();
  if (name == "number") return v.is_number() && v.kind() != Value::Kind::Bool;
  if (name == "integer") return v.kind() == Value::Kind::Int;
  if (name == "float") return v.kind() == Value::Kind::Float;
  if (name == "boolean") return v.kind() == Value::Kind::Bool;
  if (name == "true") return v.kind() == Value::Kind::Bool && v.as_bool();
  if (name == "false") return v.kind() == Value::Kind::Bool && !v.as_bool();
  if (name == "mapping") return v.is_object();
  if (name == "sequence") return v.is_array() || v.is_string() || (v.is_object() && !v.is_namespace());
  if (name == "iterable") return v.is_array() || v.is_string() || v.is_object();
  if (name == "callable") return v.kind() == Value::Kind::Callable;
  if (name == "lower") return v.is_string() && ascii_case(v.str(), false) == v.str();
  if (name == "upper") return v.is_string() && ascii_case(v.str(), true) == v.str();
  if (name == "odd" || name == "even" || name == "divisibleby") {
    RETNET_CHECK(v.is_int(), "test '{}' expects an integer, got a {}", name, v.type_name());
    if (name == "divisibleby") {
      RETNET_CHECK(other.is_int() && other.as_int() != 0, "test 'divisibleby' needs a non-zero integer");
      return v.as_int() % other.as_int() == 0;
    }
    return (v.as_int() % 2 != 0) == (name == "odd");
  }
  if (name == "eq" || name == "equalto" || name == "==") return values_equal(v, other);
  if (name == "ne" || name == "!=") return !values_equal(v, other);
  if (name == "lt" || name == "lessthan" || name == "<") return compare_values(v, other) < 0;
  if (name == "le" || name == "<=") return compare_values(v, other) <= 0;
  if (name == "gt" || name == "greaterthan" || name == ">") return compare_values(v, other) > 0;
  if (name == "ge" || name == ">=") return compare_values(v, other) >= 0;
  if (name == "sameas") return values_equal(v, other) && v.kind() == other.kind();
  if (name == "in") {
    if (other.is_string()) return v.is_string() && other.str().find(v.str()) != std::string::npos;
    if (other.is_object()) return v.is_string() && other.obj().find(v.str());
    if (other.is_array())
      return std::any_of(other.items().begin(), other.items().end(), [&](const Value& x) { return values_equal(v, x); });
    return false;
  }
  throw Error(fmt::format("unknown test '{}'", name));
}

Value bound_method(const Value& self, const std::string& name) {
  auto method = [&](auto body) { return Value::callable(name, [self, body](Evaluator& ev, CallArgs& a) { return body(ev, self, a); }); };
  if (self.is_string()) {
    if (name == "strip" || name == "lstrip" || name == "rstrip")
      return method([name](Evaluator&, const Value& s, CallArgs& a) {
        return Value::string(strip(s.str(), a.get(0, "chars"), name != "rstrip", name != "lstrip"));
      });
    if (name == "upper" || name == "lower")
      return method([name](Evaluator&, const Value& s, CallArgs&) { return Value::string(ascii_case(s.str(), name == "upper")); });
    if (name == "title") return method([](Evaluator&, const Value& s, CallArgs&) { return Value::string(title(s.str())); });
    if (name == "capitalize") return method([](Evaluator&, const Value& s, CallArgs&) { return Value::string(capitalize(s.str())); });
    if (name == "split")
      return method([](Evaluator&, const Value& s, CallArgs& a) { return split(s.str(), a.get(0, "sep"), a.get(1, "maxsplit")); });
    if (name == "startswith" || name == "endswith")
      return method([name](Evaluator&, const Value& s, CallArgs& a) {
        return Value::boolean(prefix_match(s.str(), a.get(0, "prefix"), name == "startswith"));
      });
    if (name == "replace")
      return method([](Evaluator& ev, const Value& s, CallArgs& a) {
        const Value from = a.get(0, "old"), to = a.get(1, "new"), count = a.get(2, "count");
        RETNET_CHECK(from.is_string() && to.is_string(), "replace() needs two strings");
        return Value::string(replace(ev, s.str(), from.str(), to.str(), count.is_int() ? count.as_int() : -1));
      });
    if (name == "find" || name == "count")
      return method([name](Evaluator&, const Value& s, CallArgs& a) {
        const Value sub = a.get(0, "sub");
        RETNET_CHECK(sub.is_string(), "{}() needs a string", name);
        if (name == "find") {
          const size_t at = s.str().find(sub.str());
          return Value::integer(at == std::string::npos ? -1 : static_cast<int64_t>(count_code_points(s.str().substr(0, at))));
        }
        int64_t n = 0;
        if (sub.str().empty()) return Value::integer(static_cast<int64_t>(count_code_points(s.str())) + 1);
        for (size_t i = s.str().find(sub.str()); i != std::string::npos; i = s.str().find(sub.str(), i + sub.str().size())) ++n;
        return Value::integer(n);
      });
    if (name == "join")
      return method([](Evaluator& ev, const Value& s, CallArgs& a) {
        std::string out;
        bool first = true;
        for (const auto& item : iteration_items(a.get(0, "iterable"), "join")) {
          RETNET_CHECK(item.is_string(), "join(): expected strings, got a {}", item.type_name());
          if (!first) out += s.str();
          first = false;
          out += item.str();
          ev.check_size(out.size(), "join's output");
          ev.charge_bytes(item.str().size());
        }
        return Value::string(std::move(out));
      });
  }
  if (self.is_object() && !self.is_namespace()) {
    if (name == "items" || name == "keys" || name == "values")
      return method([name](Evaluator&, const Value& d, CallArgs&) {
        Array out;
        for (const auto& [k, v] : d.obj().entries)
          out.push_back(name == "keys" ? Value::string(k) : name == "values" ? v : Value::array({Value::string(k), v}));
        return Value::array(std::move(out));
      });
    if (name == "get")
      return method([](Evaluator&, const Value& d, CallArgs& a) {
        const Value key = a.get(0, "key");
        const Value* v = key.is_string() ? d.obj().find(key.str()) : nullptr;
        if (v) return *v;
        const Value def = a.get(1, "default");
        return def.is_undefined() ? Value::none() : def;
      });
  }
  return Value();
}

std::vector<std::pair<std::string, Value>> global_functions(const std::string& origin) {
  std::vector<std::pair<std::string, Value>> g;
  g.emplace_back("range", Value::callable("range", [](Evaluator& ev, CallArgs& a) {
    const auto& p = a.positional;
    RETNET_CHECK(!p.empty() && p.size() <= 3, "range() takes 1 to 3 integers, got {} arguments", p.size());
    for (const auto& v : p) RETNET_CHECK(v.is_int(), "range() takes integers, got a {}", v.type_name());
    const int64_t start = p.size() == 1 ? 0 : p[0].as_int();
    const int64_t stop = p.size() == 1 ? p[0].as_int() : p[1].as_int();
    const int64_t step = p.size() == 3 ? p[2].as_int() : 1;
    RETNET_CHECK(step != 0, "range() step must not be zero");
    const double count = std::max(0.0, std::ceil((static_cast<double>(stop) - static_cast<double>(start)) / static_cast<double>(step)));
    ev.check_items(static_cast<size_t>(std::min(count, 1e18)), "range()");
    ev.charge(static_cast<int64_t>(count));
    Array out;
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) out.push_back(Value::integer(i));
    return Value::array(std::move(out));
  }));
  g.emplace_back("namespace", Value::callable("namespace", [](Evaluator& ev, CallArgs& a) {
    auto o = std::make_shared<Object>();
    o->is_namespace = true;
    ev.track_namespace(o);
    for (const auto& p : a.positional) {
      RETNET_CHECK(p.is_object(), "namespace() takes a dict or keyword arguments, got a {}", p.type_name());
      for (const auto& [k, v] : p.obj().entries) o->set(k, v);
    }
    for (const auto& [k, v] : a.keyword) o->set(k, v);
    return Value::object(std::move(o));
  }));
  g.emplace_back("dict", Value::callable("dict", [](Evaluator&, CallArgs& a) {
    auto o = std::make_shared<Object>();
    for (const auto& [k, v] : a.keyword) o->set(k, v);
    return Value::object(std::move(o));
  }));
  g.emplace_back("raise_exception",
                 Value::callable("raise_exception", [origin](Evaluator& ev, CallArgs& a) -> Value {
                   throw Error(fmt::format("raise_exception: {}",
                                           a.get(0, "message").to_display(ev.max_bytes())));
                 }));
  g.emplace_back("strftime_now", Value::callable("strftime_now", [](Evaluator&, CallArgs& a) {
    const Value format = a.get(0, "format");
    RETNET_CHECK(format.is_string() && format.str().size() < 256, "strftime_now() needs a format string (under 256 bytes)");
    const std::time_t now = std::time(nullptr);
    std::tm local{};
    localtime_r(&now, &local);
    char buf[1024];
    const size_t n = std::strftime(buf, sizeof buf, format.str().c_str(), &local);
    return Value::string(std::string(buf, n));
  }));
  return g;
}

}  // namespace retnet::chat_template_detail
