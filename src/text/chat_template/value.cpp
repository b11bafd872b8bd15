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
Value Value::array(Array items) {
  Value v(Kind::Array);
  v.array_ = std::make_shared<Array>(std::move(items));
  return v;
}
Value Value::object(std::shared_ptr<Object> o) {
  Value v(Kind::Object);
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

void json_value(const Value& v, int indent, bool sort_keys, int depth, std::string& out) {
  RETNET_CHECK(depth < 512, "tojson: value nested deeper than 512 levels");
  const std::string item_sep = indent > 0 ? "," : ", ";
  auto newline = [&](int level) {
    out += '\n';
    out.append(static_cast<size_t>(indent * level), ' ');
  };
  switch (v.kind()) {
    case Value::Kind::Undefined:
    case Value::Kind::None: out += "null"; return;
    case Value::Kind::Bool: out += v.as_bool() ? "true" : "false"; return;
    case Value::Kind::Int: out += std::to_string(v.as_int()); return;
    case Value::Kind::Float: {
      const double d = v.as_double();
      out += std::isnan(d) ? "NaN" : std::isinf(d) ? (d < 0 ? "-Infinity" : "Infinity") : format_float(d);
      return;
    }
    case Value::Kind::String: json_string(v.str(), out); return;
    case Value::Kind::Array: {
      const auto& items = v.items();
      if (items.empty()) { out += "[]"; return; }
      out += '[';
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) out += item_sep;
        if (indent > 0) newline(depth + 1);
        json_value(items[i], indent, sort_keys, depth + 1, out);
      }
      if (indent > 0) newline(depth);
      out += ']';
      return;
    }
    case Value::Kind::Object: {
      std::vector<const std::pair<std::string, Value>*> entries;
      for (const auto& e : v.obj().entries) entries.push_back(&e);
      if (sort_keys)
        stable_sort_values(entries, [](auto* a, auto* b) { return a->first < b->first; });
      if (entries.empty()) { out += "{}"; return; }
      out += '{';
      for (size_t i = 0; i < entries.size(); ++i) {
        if (i) out += item_sep;
        if (indent > 0) newline(depth + 1);
        json_string(entries[i]->first, out);
        out += ": ";
        json_value(entries[i]->second, indent, sort_keys, depth + 1, out);
      }
      if (indent > 0) newline(depth);
      out += '}';
      return;
    }
    case Value::Kind::Callable:
      throw Error(fmt::format("tojson: a function ('{}') is not JSON serializable", v.callable_name()));
  }
}

}  // namespace

std::string to_json(const Value& v, int indent, bool sort_keys) {
  std::string out;
  json_value(v, indent, sort_keys, 0, out);
  return out;
}

std::string Value::to_repr() const {
  switch (kind_) {
    case Kind::String: return repr_string(*string_);
    case Kind::Undefined: return "";
    default: return to_display();
  }
}

std::string Value::to_display() const {
  switch (kind_) {
    case Kind::Undefined: return "";
    case Kind::None: return "None";
    case Kind::Bool: return int_ ? "True" : "False";
    case Kind::Int: return std::to_string(int_);
    case Kind::Float: return format_float(float_);
    case Kind::String: return *string_;
    case Kind::Array: {
      std::string out = "[";
      for (size_t i = 0; i < array_->size(); ++i) out += (i ? ", " : "") + (*array_)[i].to_repr();
      return out + "]";
    }
    case Kind::Object: {
      std::string out = object_->is_namespace ? "<Namespace {" : "{";
      for (size_t i = 0; i < object_->entries.size(); ++i)
        out += (i ? ", " : "") + repr_string(object_->entries[i].first) + ": " +
               object_->entries[i].second.to_repr();
      return out + (object_->is_namespace ? "}>" : "}");
    }
    case Kind::Callable: return "<function " + *string_ + ">";
  }
  return "";
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

bool values_equal(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_int() && b.is_int()) return a.as_int() == b.as_int();
    return a.as_double() == b.as_double();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::Undefined:
    case Value::Kind::None: return true;
    case Value::Kind::String: return a.str() == b.str();
    case Value::Kind::Array: {
      if (a.items().size() != b.items().size()) return false;
      for (size_t i = 0; i < a.items().size(); ++i)
        if (!values_equal(a.items()[i], b.items()[i])) return false;
      return true;
    }
    case Value::Kind::Object: {
      if (&a.obj() == &b.obj()) return true;
      if (a.obj().entries.size() != b.obj().entries.size()) return false;
      for (const auto& [k, v] : a.obj().entries) {
        const Value* other = b.obj().find(k);
        if (!other || !values_equal(v, *other)) return false;
      }
      return true;
    }
    case Value::Kind::Callable: return &a.function() == &b.function();
    default: return false;
  }
}

int compare_values(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_int() && b.is_int()) return a.as_int() < b.as_int() ? -1 : a.as_int() > b.as_int();
    const double x = a.as_double(), y = b.as_double();
    return x < y ? -1 : x > y;
  }
  if (a.is_string() && b.is_string()) return a.str().compare(b.str()) < 0 ? -1 : a.str() > b.str();
  if (a.is_array() && b.is_array()) {
    const size_t n = std::min(a.items().size(), b.items().size());
    for (size_t i = 0; i < n; ++i)
      if (int c = compare_values(a.items()[i], b.items()[i])) return c;
    return a.items().size() < b.items().size() ? -1 : a.items().size() > b.items().size();
  }
  throw Error(fmt::format("'<' is not supported between a {} and a {}", a.type_name(), b.type_name()));
}

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
