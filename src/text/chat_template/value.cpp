// Python semantics of the template values: truth, str(), repr(), equality, ordering, json.dumps.
#include "value.h"

#include "stable_sort.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "retnet/core/error.h"

namespace retnet::chat_template_detail {

Value Value::string(std::string s) {
  Value v(Kind::String);
  v.string_ = std::make_shared<const std::string>(std::move(s));
  return v;
}
namespace {
int nested_depth(int below, const char* what) {
  RETNET_CHECK(below < kMaxValueDepth, "a {} nested deeper than {} levels", what, kMaxValueDepth);
  return below + 1;
}
}  // namespace

Value Value::array(Array items) {
  Value v(Kind::Array);
  int below = 0;
  for (const auto& item : items) below = std::max(below, item.depth_);
  v.depth_ = nested_depth(below, "list");
  v.array_ = std::make_shared<Array>(std::move(items));
  return v;
}
Value Value::object(std::shared_ptr<Object> o) {
  Value v(Kind::Object);
  int below = 0;
  for (const auto& entry : o->entries) below = std::max(below, entry.second.depth_);
  v.depth_ = nested_depth(below, "dict");
  v.object_ = std::move(o);
  return v;
}
Value Value::callable(std::string name, Function f) {
  Value v(Kind::Callable);
  v.string_ = std::make_shared<const std::string>(std::move(name));
  v.function_ = std::make_shared<const Function>(std::move(f));
  return v;
}

Value Value::from_json(const nlohmann::ordered_json& j) {
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null: return none();
    case nlohmann::ordered_json::value_t::boolean: return boolean(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer: return integer(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      const auto u = j.get<uint64_t>();
      return u > static_cast<uint64_t>(INT64_MAX) ? number(static_cast<double>(u))
                                                   : integer(static_cast<int64_t>(u));
    }
    case nlohmann::ordered_json::value_t::number_float: return number(j.get<double>());
    case nlohmann::ordered_json::value_t::string: return string(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      Array a;
      a.reserve(j.size());
      for (const auto& e : j) a.push_back(from_json(e));
      return array(std::move(a));
    }
    case nlohmann::ordered_json::value_t::object: {
      auto o = std::make_shared<Object>();
      o->entries.reserve(j.size());
      for (const auto& [k, e] : j.items()) o->entries.emplace_back(k, from_json(e));
      return object(std::move(o));
    }
    default: return Value();
  }
}

bool Value::is_namespace() const { return kind_ == Kind::Object && object_->is_namespace; }

bool Value::truthy() const {
  switch (kind_) {
    case Kind::Undefined:
    case Kind::None: return false;
    case Kind::Bool:
    case Kind::Int: return int_ != 0;
    case Kind::Float: return float_ != 0;
    case Kind::String: return !string_->empty();
    case Kind::Array: return !array_->empty();
    case Kind::Object: return object_->is_namespace || !object_->entries.empty();
    case Kind::Callable: return true;
  }
  return false;
}

const char* Value::type_name() const {
  switch (kind_) {
    case Kind::Undefined: return "undefined";
    case Kind::None: return "NoneType";
    case Kind::Bool: return "bool";
    case Kind::Int: return "int";
    case Kind::Float: return "float";
    case Kind::String: return "str";
    case Kind::Array: return "list";
    case Kind::Object: return object_->is_namespace ? "Namespace" : "dict";
    case Kind::Callable: return "function";
  }
  return "?";
}

std::string format_float(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d < 0 ? "-inf" : "inf";
  if (d == 0) return std::signbit(d) ? "-0.0" : "0.0";
  // Shortest round-trip digits, then Python's layout: positional for exponents in [-4, 16).
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  std::string sci(buf, r.ptr);
  const auto e_pos = sci.find('e');
  std::string mant = sci.substr(0, e_pos);
  const int exp = std::stoi(sci.substr(e_pos + 1));
  const bool neg = mant[0] == '-';
  if (neg) mant.erase(0, 1);
  std::string digits;
  for (char c : mant)
    if (c != '.') digits += c;
  std::string out = neg ? "-" : "";
  if (exp >= -4 && exp < 16) {
    if (exp < 0) {
      out += "0." + std::string(static_cast<size_t>(-exp - 1), '0') + digits;
    } else if (static_cast<int>(digits.size()) <= exp + 1) {
      out += digits + std::string(static_cast<size_t>(exp + 1 - static_cast<int>(digits.size())), '0') + ".0";
    } else {
      out += digits.substr(0, static_cast<size_t>(exp + 1)) + "." + digits.substr(static_cast<size_t>(exp + 1));
    }
    return out;
  }
  out += digits.substr(0, 1);
  if (digits.size() > 1) out += "." + digits.substr(1);
  char ebuf[16];
  std::snprintf(ebuf, sizeof ebuf, "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
  return out + ebuf;
}

namespace {

std::string repr_string(const std::string& s) {
  const bool has_single = s.find('\'') != std::string::npos;
  const char quote = has_single && s.find('"') == std::string::npos ? '"' : '\'';
  std::string out(1, quote);
  for (unsigned char c : s) {
    if (c == '\\') out += "\\\\";
    else if (c == static_cast<unsigned char>(quote)) { out += '\\'; out += quote; }
    else if (c == '\n') out += "\\n";
    else if (c == '\r') out += "\\r";
    else if (c == '\t') out += "\\t";
    else if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else out += static_cast<char>(c);
  }
  return out + quote;
}

void json_string(const std::string& s, std::string& out) {
  out += '"';
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else out += static_cast<char>(c);
    }
  }
  out += '"';
}

// json.dumps into `out`; `indent` is the pretty-printing unit, or null for one line.
struct JsonWriter {
  const std::string* indent;
  bool sort_keys;
  size_t max_bytes;
  std::string& out;

  void check() const {
    RETNET_CHECK(out.size() <= max_bytes, "tojson: the output would exceed the limit of {} bytes",
                 max_bytes);
  }
  void newline(int level) {
    // Checked before appending: an indent of a million spaces is refused, not allocated.
    RETNET_CHECK(
        indent->size() * static_cast<size_t>(level) <= max_bytes - std::min(max_bytes, out.size()),
        "tojson: the output would exceed the limit of {} bytes", max_bytes);
    out += '\n';
    for (int i = 0; i < level; ++i) out += *indent;
  }
  // `open` items... `close`, each item on a line of its own when indenting.
  template <typename WriteItem>
  void container(char open, char close, size_t count, int depth, WriteItem write_item) {
    out += open;
    for (size_t i = 0; i < count; ++i) {
      if (i) out += indent ? "," : ", ";
      if (indent) newline(depth + 1);
      write_item(i);
    }
    if (indent && count > 0) newline(depth);
    out += close;
  }
  void write(const Value& v, int depth) {
    RETNET_CHECK(depth < kMaxValueDepth, "tojson: value nested deeper than {} levels",
                 kMaxValueDepth);
    check();
    switch (v.kind()) {
      case Value::Kind::Undefined:
      case Value::Kind::None:
        out += "null";
        return;
      case Value::Kind::Bool:
        out += v.as_bool() ? "true" : "false";
        return;
      case Value::Kind::Int:
        out += std::to_string(v.as_int());
        return;
      case Value::Kind::Float: {
        const double d = v.as_double();
        out += std::isnan(d)   ? "NaN"
               : std::isinf(d) ? (d < 0 ? "-Infinity" : "Infinity")
                               : format_float(d);
        return;
      }
      case Value::Kind::String:
        json_string(v.str(), out);
        return;
      case Value::Kind::Array: {
        const auto& items = v.items();
        container('[', ']', items.size(), depth, [&](size_t i) { write(items[i], depth + 1); });
        return;
      }
      case Value::Kind::Object: {
        std::vector<const std::pair<std::string, Value>*> entries;
        for (const auto& e : v.obj().entries) entries.push_back(&e);
        if (sort_keys)
          stable_sort_values(entries, [](auto* a, auto* b) { return a->first < b->first; });
        container('{', '}', entries.size(), depth, [&](size_t i) {
          json_string(entries[i]->first, out);
          out += ": ";
          write(entries[i]->second, depth + 1);
        });
        return;
      }
      case Value::Kind::Callable:
        throw Error(
            fmt::format("tojson: a function ('{}') is not JSON serializable", v.callable_name()));
    }
  }
};

// str() and repr() into `out`, refusing more than `max_bytes` or kMaxValueDepth levels.
void display_into(const Value& v, bool repr, int depth, size_t max_bytes, std::string& out) {
  RETNET_CHECK(depth < kMaxValueDepth,
               "a value nested deeper than {} levels (a namespace that holds itself?)",
               kMaxValueDepth);
  RETNET_CHECK(out.size() <= max_bytes, "printing a {} would exceed the limit of {} bytes",
               v.type_name(), max_bytes);
  switch (v.kind()) {
    case Value::Kind::Undefined:
      return;
    case Value::Kind::None:
      out += "None";
      return;
    case Value::Kind::Bool:
      out += v.as_bool() ? "True" : "False";
      return;
    case Value::Kind::Int: out += std::to_string(v.as_int()); return;
    case Value::Kind::Float:
      out += format_float(v.as_double());
      return;
    case Value::Kind::String:
      if (repr)
        out += repr_string(v.str());
      else
        out += v.str();
      break;
    case Value::Kind::Array: {
      out += '[';
      for (size_t i = 0; i < v.items().size(); ++i) {
        if (i) out += ", ";
        display_into(v.items()[i], true, depth + 1, max_bytes, out);
      }
      out += ']';
      break;
    }
    case Value::Kind::Object: {
      const Object& o = v.obj();
      out += o.is_namespace ? "<Namespace {" : "{";
      for (size_t i = 0; i < o.entries.size(); ++i) {
        if (i) out += ", ";
        out += repr_string(o.entries[i].first);
        out += ": ";
        display_into(o.entries[i].second, true, depth + 1, max_bytes, out);
      }
      out += o.is_namespace ? "}>" : "}";
      break;
    }
    case Value::Kind::Callable:
      out += "<function " + v.callable_name() + ">";
      return;
  }
  RETNET_CHECK(out.size() <= max_bytes, "printing a {} would exceed the limit of {} bytes",
               v.type_name(), max_bytes);
}

}  // namespace

std::string to_json(const Value& v, int64_t indent, bool sort_keys, size_t max_bytes) {
  std::string out;
  const std::string unit(
      static_cast<size_t>(std::clamp<int64_t>(indent, 0, static_cast<int64_t>(max_bytes))), ' ');
  JsonWriter writer{indent >= 0 ? &unit : nullptr, sort_keys, max_bytes, out};
  writer.write(v, 0);
  writer.check();
  return out;
}

std::string Value::to_repr(size_t max_bytes) const {
  std::string out;
  display_into(*this, true, 0, max_bytes, out);
  return out;
}

std::string Value::to_display(size_t max_bytes) const {
  if (kind_ == Kind::String) return *string_;
  std::string out;
  display_into(*this, false, 0, max_bytes, out);
  return out;
}

const Value* Object::find(const std::string& key) const {
  for (const auto& [k, v] : entries)
    if (k == key) return &v;
  return nullptr;
}

void Object::set(const std::string& key, Value v) {
  for (auto& [k, old] : entries)
    if (k == key) { old = std::move(v); return; }
  entries.emplace_back(key, std::move(v));
}

Value CallArgs::get(size_t i, const std::string& name) const {
  if (i < positional.size()) return positional[i];
  for (const auto& [k, v] : keyword)
    if (k == name) return v;
  return Value();
}

namespace {

// Items two values may visit between them: shared sublists would otherwise make a comparison of
// two small-looking values take exponential time.
constexpr int64_t kMaxCompareVisits = int64_t{1} << 22;

struct Comparer {
  int64_t visits = 0;

  void visit(int depth) {
    RETNET_CHECK(++visits <= kMaxCompareVisits, "comparing two values visited more than {} items",
                 kMaxCompareVisits);
    RETNET_CHECK(depth < kMaxValueDepth, "comparing values nested deeper than {} levels",
                 kMaxValueDepth);
  }

  bool equal(const Value& a, const Value& b, int depth) {
    visit(depth);
    if (a.is_number() && b.is_number()) {
      if (a.is_int() && b.is_int()) return a.as_int() == b.as_int();
      return a.as_double() == b.as_double();
    }
    if (a.kind() != b.kind()) return false;
    switch (a.kind()) {
      case Value::Kind::Undefined:
      case Value::Kind::None:
        return true;
      case Value::Kind::String:
        return a.str() == b.str();
      case Value::Kind::Array: {
        if (a.items().size() != b.items().size()) return false;
        for (size_t i = 0; i < a.items().size(); ++i)
          if (!equal(a.items()[i], b.items()[i], depth + 1)) return false;
        return true;
      }
      case Value::Kind::Object: {
        if (&a.obj() == &b.obj()) return true;
        if (a.obj().entries.size() != b.obj().entries.size()) return false;
        for (const auto& [k, v] : a.obj().entries) {
          const Value* other = b.obj().find(k);
          if (!other || !equal(v, *other, depth + 1)) return false;
        }
        return true;
      }
      case Value::Kind::Callable:
        return &a.function() == &b.function();
      default:
        return false;
    }
  }

  int compare(const Value& a, const Value& b, int depth) {
    visit(depth);
    if (a.is_number() && b.is_number()) {
      if (a.is_int() && b.is_int()) return a.as_int() < b.as_int() ? -1 : a.as_int() > b.as_int();
      const double x = a.as_double(), y = b.as_double();
      return x < y ? -1 : x > y;
    }
    if (a.is_string() && b.is_string())
      return a.str().compare(b.str()) < 0 ? -1 : a.str() > b.str();
    if (a.is_array() && b.is_array()) {
      const size_t n = std::min(a.items().size(), b.items().size());
      for (size_t i = 0; i < n; ++i)
        if (int c = compare(a.items()[i], b.items()[i], depth + 1)) return c;
      return a.items().size() < b.items().size() ? -1 : a.items().size() > b.items().size();
    }
    throw Error(
        fmt::format("'<' is not supported between a {} and a {}", a.type_name(), b.type_name()));
  }
};

}  // namespace

bool values_equal(const Value& a, const Value& b) { return Comparer().equal(a, b, 0); }

int compare_values(const Value& a, const Value& b) { return Comparer().compare(a, b, 0); }

std::vector<std::string> split_code_points(const std::string& s) {
  std::vector<std::string> out;
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
    if (i + n > s.size()) n = 1;
    out.push_back(s.substr(i, n));
    i += n;
  }
  return out;
}

size_t count_code_points(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

Array iteration_items(const Value& v, const std::string& context) {
  switch (v.kind()) {
    case Value::Kind::Undefined: return {};
    case Value::Kind::Array: return v.items();
    case Value::Kind::Object: {
      Array keys;
      for (const auto& [k, _] : v.obj().entries) keys.push_back(Value::string(k));
      return keys;
    }
    case Value::Kind::String: {
      Array chars;
      for (auto& c : split_code_points(v.str())) chars.push_back(Value::string(std::move(c)));
      return chars;
    }
    default:
      throw Error(fmt::format("{}a {} is not iterable", context.empty() ? "" : context + ": ",
                              v.type_name()));
  }
}

}  // namespace retnet::chat_template_detail
