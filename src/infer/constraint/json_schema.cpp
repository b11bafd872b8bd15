#include "retnet/infer/json_schema.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <optional>

namespace retnet {
namespace {

using json = nlohmann::ordered_json;
using Alt = Grammar::Alternative;

constexpr int kMaxWhitespace = 8;  // bytes between two tokens
constexpr int kMaxDigits = 16;     // before or after the point
constexpr int kMaxExponentDigits = 3;
constexpr int64_t kMaxRepeat = 1024;  // the largest length or item bound compiled
constexpr int kMaxSchemaDepth = 64;

Grammar::ByteSet set_or(Grammar::ByteSet a, const Grammar::ByteSet& b) {
  for (size_t i = 0; i < a.size(); ++i) a[i] |= b[i];
  return a;
}

Grammar::ByteSet set_without(Grammar::ByteSet a, unsigned char c) {
  a[c >> 6] &= ~(uint64_t{1} << (c & 63));
  return a;
}

std::string join_path(const std::string& path, const std::string& key) {
  return path.empty() ? key : path + "." + key;
}

class SchemaCompiler {
 public:
  explicit SchemaCompiler(const json* root) : root_(root) {}
  Grammar grammar;

  int32_t schema(const json& s, const std::string& path, int depth);
  int32_t any_object();

 private:
  int32_t rule(std::vector<Alt> alts) {
    const int32_t r = grammar.add_rule();
    grammar.rules[static_cast<size_t>(r)] = std::move(alts);
    return r;
  }
  Grammar::Element set(const Grammar::ByteSet& s) { return grammar.set_element(s); }
  Grammar::Element lit(unsigned char c) { return grammar.set_element(Grammar::byte(c)); }
  static Grammar::Element ref(int32_t r) { return Grammar::rule_element(r); }
  Alt literal_alt(const std::string& text) {
    Alt a;
    grammar.append_literal(a, text);
    return a;
  }
  // ε | x | x x | ... up to `n` times: rule of the chain.
  int32_t up_to(Grammar::Element x, int64_t n) {
    int32_t r = rule({Alt{}});
    for (int64_t i = 0; i < n; ++i) r = rule({Alt{}, Alt{x, ref(r)}});
    return r;
  }
  int32_t star(Grammar::Element x) {  // ε | x star
    const int32_t r = grammar.add_rule();
    grammar.rules[static_cast<size_t>(r)] = {Alt{}, Alt{x, ref(r)}};
    return r;
  }
  int32_t ws() {
    if (ws_ < 0)
      ws_ = up_to(set(set_or(set_or(Grammar::byte(' '), Grammar::byte('\t')),
                             set_or(Grammar::byte('\n'), Grammar::byte('\r')))),
                  kMaxWhitespace);
    return ws_;
  }
  int32_t string_char();
  int32_t string(int64_t min_length, std::optional<int64_t> max_length);
  int32_t number(bool integer);
  int32_t any_value();
  int32_t any_array() { return array(ref(any_value()), 0, std::nullopt); }
  int32_t array(Grammar::Element item, int64_t min_items, std::optional<int64_t> max_items);
  int32_t object(const json& s, const std::string& path, int depth);
  int32_t literal(const json& value) { return rule({literal_alt(value.dump())}); }
  int32_t typed(const std::string& type, const json& s, const std::string& path, int depth);
  int32_t reference(const std::string& target, const std::string& path, int depth);
  int64_t bound(const json& s, const char* key, const std::string& path, int64_t fallback);

  const json* root_;
  int32_t ws_ = -1, char_ = -1, string_ = -1, value_ = -1, object_ = -1;
  int32_t number_[2] = {-1, -1};
  std::map<std::string, int32_t> refs_;
};

// One character of a JSON string: printable ASCII but '"' and '\', an escape, or one UTF-8
// character (well-formed: no overlong forms, surrogates or code points past U+10FFFF).
int32_t SchemaCompiler::string_char() {
  if (char_ >= 0) return char_;
  const auto cont = Grammar::bytes_in(0x80, 0xBF);
  const auto hex = set_or(set_or(Grammar::bytes_in('0', '9'), Grammar::bytes_in('a', 'f')),
                          Grammar::bytes_in('A', 'F'));
  Grammar::ByteSet escaped{};
  for (unsigned char c : std::string("\"\\/bfnrt")) escaped = set_or(escaped, Grammar::byte(c));
  std::vector<Alt> alts = {
      {set(set_without(set_without(Grammar::bytes_in(0x20, 0x7F), '"'), '\\'))},
      {lit('\\'), set(escaped)},
      {lit('\\'), lit('u'), set(hex), set(hex), set(hex), set(hex)},
      {set(Grammar::bytes_in(0xC2, 0xDF)), set(cont)},
      {lit(0xE0), set(Grammar::bytes_in(0xA0, 0xBF)), set(cont)},
      {set(set_or(Grammar::bytes_in(0xE1, 0xEC), Grammar::bytes_in(0xEE, 0xEF))), set(cont),
       set(cont)},
      {lit(0xED), set(Grammar::bytes_in(0x80, 0x9F)), set(cont)},
      {lit(0xF0), set(Grammar::bytes_in(0x90, 0xBF)), set(cont), set(cont)},
      {set(Grammar::bytes_in(0xF1, 0xF3)), set(cont), set(cont), set(cont)},
      {lit(0xF4), set(Grammar::bytes_in(0x80, 0x8F)), set(cont), set(cont)}};
  char_ = rule(std::move(alts));
  return char_;
}

int32_t SchemaCompiler::string(int64_t min_length, std::optional<int64_t> max_length) {
  const bool plain = min_length == 0 && !max_length;
  if (plain && string_ >= 0) return string_;
  const Grammar::Element c = ref(string_char());
  Alt a = {lit('"')};
  for (int64_t i = 0; i < min_length; ++i) a.push_back(c);
  a.push_back(ref(max_length ? up_to(c, *max_length - min_length) : star(c)));
  a.push_back(lit('"'));
  const int32_t r = rule({std::move(a)});
  if (plain) string_ = r;
  return r;
}

// -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)? with bounded digit runs (integers: no fraction
// or exponent).
int32_t SchemaCompiler::number(bool integer) {
  int32_t& cached = number_[integer ? 1 : 0];
  if (cached >= 0) return cached;
  const Grammar::Element digit = set(Grammar::bytes_in('0', '9'));
  const int32_t sign = rule({Alt{}, Alt{lit('-')}});
  const int32_t whole = rule(
      {Alt{lit('0')}, Alt{set(Grammar::bytes_in('1', '9')), ref(up_to(digit, kMaxDigits - 1))}});
  Alt a = {ref(sign), ref(whole)};
  if (!integer) {
    const int32_t fraction = rule({Alt{}, Alt{lit('.'), digit, ref(up_to(digit, kMaxDigits - 1))}});
    const int32_t exp_sign = rule({Alt{}, Alt{lit('-')}, Alt{lit('+')}});
    const int32_t exponent =
        rule({Alt{}, Alt{set(set_or(Grammar::byte('e'), Grammar::byte('E'))), ref(exp_sign), digit,
                         ref(up_to(digit, kMaxExponentDigits - 1))}});
    a.push_back(ref(fraction));
    a.push_back(ref(exponent));
  }
  cached = rule({std::move(a)});
  return cached;
}

int32_t SchemaCompiler::any_value() {
  if (value_ >= 0) return value_;
  value_ = grammar.add_rule();  // referenced from inside objects and arrays
  std::vector<Alt> alts = {{ref(any_object())},  {ref(any_array())},  {ref(string(0, {}))},
                           {ref(number(false))}, literal_alt("true"), literal_alt("false"),
                           literal_alt("null")};
  grammar.rules[static_cast<size_t>(value_)] = std::move(alts);
  return value_;
}

// "{" ws ( "}" | member ("," ws member)* "}" ), member = string ws ":" ws value ws.
int32_t SchemaCompiler::any_object() {
  if (object_ >= 0) return object_;
  object_ = grammar.add_rule();
  const int32_t member =
      rule({{ref(string(0, {})), ref(ws()), lit(':'), ref(ws()), ref(any_value()), ref(ws())}});
  const int32_t more = grammar.add_rule();
  grammar.rules[static_cast<size_t>(more)] = {Alt{},
                                              Alt{lit(','), ref(ws()), ref(member), ref(more)}};
  grammar.rules[static_cast<size_t>(object_)] = {
      {lit('{'), ref(ws()), lit('}')}, {lit('{'), ref(ws()), ref(member), ref(more), lit('}')}};
  return object_;
}

// "[" ws ( "]" | item ws ("," ws item ws)* "]" ) with the item count bounded.
int32_t SchemaCompiler::array(Grammar::Element item, int64_t min_items,
                              std::optional<int64_t> max_items) {
  const int32_t next = rule({{lit(','), ref(ws()), item, ref(ws())}});
  std::vector<Alt> alts;
  if (min_items == 0) alts.push_back({lit('['), ref(ws()), lit(']')});
  if (!max_items || *max_items > 0) {
    Alt a = {lit('['), ref(ws()), item, ref(ws())};
    for (int64_t i = 1; i < std::max<int64_t>(min_items, 1); ++i) a.push_back(ref(next));
    a.push_back(ref(max_items ? up_to(ref(next), *max_items - std::max<int64_t>(min_items, 1))
                              : star(ref(next))));
    a.push_back(lit(']'));
    alts.push_back(std::move(a));
  }
  return rule(std::move(alts));
}

int64_t SchemaCompiler::bound(const json& s, const char* key, const std::string& path,
                              int64_t fallback) {
  auto it = s.find(key);
  if (it == s.end()) return fallback;
  if (!it->is_number_unsigned() || it->get<uint64_t>() > static_cast<uint64_t>(kMaxRepeat))
    throw JsonSchemaError(join_path(path, key), fmt::format("'{}' must be an integer in [0, {}]",
                                                            join_path(path, key), kMaxRepeat));
  return static_cast<int64_t>(it->get<uint64_t>());
}

// Properties in the schema's order, each optional one present or not: rule k writes the
// properties from k on, `first` when none came before it (no comma).
int32_t SchemaCompiler::object(const json& s, const std::string& path, int depth) {
  const auto props = s.find("properties");
  const auto extra = s.find("additionalProperties");
  const bool closed = extra != s.end() && extra->is_boolean() && !extra->get<bool>();
  if (extra != s.end() && !closed && !(extra->is_boolean() && props == s.end()))
    throw JsonSchemaError(join_path(path, "additionalProperties"),
                          fmt::format("'{}' is supported only as false (or true without "
                                      "'properties')",
                                      join_path(path, "additionalProperties")));
  std::vector<std::string> required;
  if (auto r = s.find("required"); r != s.end()) {
    if (!r->is_array())
      throw JsonSchemaError(
          join_path(path, "required"),
          fmt::format("'{}' must be a list of property names", join_path(path, "required")));
    for (const auto& name : *r) {
      if (!name.is_string() || props == s.end() || !props->is_object() ||
          !props->contains(name.get<std::string>()))
        throw JsonSchemaError(join_path(path, "required"),
                              fmt::format("'{}' must name properties listed in 'properties'",
                                          join_path(path, "required")));
      required.push_back(name.get<std::string>());
    }
  }
  if (props == s.end() && !closed) return any_object();
  std::vector<std::pair<std::string, int32_t>> members;  // key, rule of `"key" ws : ws value ws`
  std::vector<bool> is_required;
  if (props != s.end()) {
    const std::string at = join_path(path, "properties");
    if (!props->is_object()) throw JsonSchemaError(at, fmt::format("'{}' must be an object", at));
    for (auto it = props->begin(); it != props->end(); ++it) {
      const int32_t value = schema(it.value(), join_path(at, it.key()), depth + 1);
      Alt a = literal_alt(json(it.key()).dump());
      a.insert(a.end(), {ref(ws()), lit(':'), ref(ws()), ref(value), ref(ws())});
      members.emplace_back(it.key(), rule({std::move(a)}));
      is_required.push_back(std::find(required.begin(), required.end(), it.key()) !=
                            required.end());
    }
  }
  const size_t n = members.size();
  int32_t after[2] = {rule({Alt{}}), rule({Alt{}})};  // [first]: rules for k = n
  for (size_t k = n; k-- > 0;) {
    int32_t here[2];
    for (int first = 0; first < 2; ++first) {
      Alt with = first ? Alt{} : Alt{lit(','), ref(ws())};
      with.push_back(ref(members[k].second));
      with.push_back(ref(after[0]));
      std::vector<Alt> alts = {std::move(with)};
      if (!is_required[k]) alts.push_back({ref(after[first])});
      here[first] = rule(std::move(alts));
    }
    after[0] = here[0];
    after[1] = here[1];
  }
  return rule({{lit('{'), ref(ws()), ref(after[1]), lit('}')}});
}

int32_t SchemaCompiler::reference(const std::string& target, const std::string& path, int depth) {
  if (auto it = refs_.find(target); it != refs_.end()) return it->second;
  const json* resolved = nullptr;
  for (const char* prefix : {"#/$defs/", "#/definitions/"}) {
    const std::string p = prefix;
    if (target.compare(0, p.size(), p) != 0) continue;
    const std::string section = p.substr(2, p.size() - 3), name = target.substr(p.size());
    auto defs = root_->find(section);
    if (defs != root_->end() && defs->is_object() && defs->contains(name))
      resolved = &(*defs)[name];
  }
  if (target == "#") resolved = root_;
  if (!resolved)
    throw JsonSchemaError(join_path(path, "$ref"),
                          fmt::format("'{}' must be \"#\" or point into the root's $defs or "
                                      "definitions, got '{}'",
                                      join_path(path, "$ref"), target));
  // Registered before it is compiled, so that a recursive schema refers to itself.
  const int32_t r = grammar.add_rule();
  refs_[target] = r;
  const int32_t body = schema(*resolved, target.substr(target == "#" ? 1 : 2), depth + 1);
  grammar.rules[static_cast<size_t>(r)] = {{ref(body)}};
  return r;
}

int32_t SchemaCompiler::typed(const std::string& type, const json& s, const std::string& path,
                              int depth) {
  if (type == "object") return object(s, path, depth);
  if (type == "array") {
    auto items = s.find("items");
    if (items != s.end() && !items->is_object() && !items->is_boolean())
      throw JsonSchemaError(join_path(path, "items"),
                            fmt::format("'{}' must be one schema (tuples are not supported)",
                                        join_path(path, "items")));
    const int32_t item =
        items == s.end() ? any_value() : schema(*items, join_path(path, "items"), depth + 1);
    const int64_t lo = bound(s, "minItems", path, 0);
    const int64_t hi = bound(s, "maxItems", path, -1);
    if (hi >= 0 && hi < lo)
      throw JsonSchemaError(join_path(path, "maxItems"),
                            fmt::format("'{}' is below minItems", join_path(path, "maxItems")));
    return array(ref(item), lo, hi >= 0 ? std::optional<int64_t>(hi) : std::nullopt);
  }
  if (type == "string") {
    const int64_t lo = bound(s, "minLength", path, 0);
    const int64_t hi = bound(s, "maxLength", path, -1);
    if (hi >= 0 && hi < lo)
      throw JsonSchemaError(join_path(path, "maxLength"),
                            fmt::format("'{}' is below minLength", join_path(path, "maxLength")));
    return string(lo, hi >= 0 ? std::optional<int64_t>(hi) : std::nullopt);
  }
  if (type == "number" || type == "integer") return number(type == "integer");
  if (type == "boolean") return rule({literal_alt("true"), literal_alt("false")});
  if (type == "null") return literal(nullptr);
  throw JsonSchemaError(join_path(path, "type"),
                        fmt::format("'{}' must be object, array, string, number, integer, "
                                    "boolean or null, got '{}'",
                                    join_path(path, "type"), type));
}

int32_t SchemaCompiler::schema(const json& s, const std::string& path, int depth) {
  const std::string here = path.empty() ? "the schema" : path;
  if (depth > kMaxSchemaDepth)
    throw JsonSchemaError(
        path, fmt::format("'{}' is nested deeper than {} schemas", here, kMaxSchemaDepth));
  if (s.is_boolean()) {
    if (s.get<bool>()) return any_value();
    throw JsonSchemaError(path, fmt::format("'{}' is false: no value is allowed", here));
  }
  if (!s.is_object())
    throw JsonSchemaError(path, fmt::format("'{}' must be a schema object", here));
  static const char* const known[] = {
      "type",        "properties", "required",    "additionalProperties",
      "enum",        "const",      "items",       "minItems",
      "maxItems",    "minLength",  "maxLength",   "anyOf",
      "$ref",        "$defs",      "definitions", "title",
      "description", "default",    "examples",    "$comment",
      "$schema",     "$id"};
  for (auto it = s.begin(); it != s.end(); ++it)
    if (std::none_of(std::begin(known), std::end(known),
                     [&](const char* k) { return it.key() == k; }))
      throw JsonSchemaError(join_path(path, it.key()),
                            fmt::format("'{}' is not supported (docs/server.md lists the JSON "
                                        "schema keywords structured output reads)",
                                        join_path(path, it.key())));
  if (auto r = s.find("$ref"); r != s.end()) {
    if (!r->is_string())
      throw JsonSchemaError(join_path(path, "$ref"),
                            fmt::format("'{}' must be a string", join_path(path, "$ref")));
    return reference(r->get<std::string>(), path, depth);
  }
  if (auto c = s.find("const"); c != s.end()) return literal(*c);
  if (auto e = s.find("enum"); e != s.end()) {
    if (!e->is_array() || e->empty())
      throw JsonSchemaError(join_path(path, "enum"),
                            fmt::format("'{}' must be a non-empty list", join_path(path, "enum")));
    std::vector<Alt> alts;
    for (const auto& v : *e) alts.push_back(literal_alt(v.dump()));
    return rule(std::move(alts));
  }
  if (auto a = s.find("anyOf"); a != s.end()) {
    if (!a->is_array() || a->empty())
      throw JsonSchemaError(
          join_path(path, "anyOf"),
          fmt::format("'{}' must be a non-empty list of schemas", join_path(path, "anyOf")));
    std::vector<Alt> alts;
    for (size_t i = 0; i < a->size(); ++i)
      alts.push_back(
          {ref(schema((*a)[i], fmt::format("{}[{}]", join_path(path, "anyOf"), i), depth + 1))});
    return rule(std::move(alts));
  }
  auto t = s.find("type");
  if (t == s.end()) {
    if (s.contains("properties") || s.contains("additionalProperties") || s.contains("required"))
      return object(s, path, depth);
    if (s.contains("items")) return typed("array", s, path, depth);
    return any_value();
  }
  if (t->is_string()) return typed(t->get<std::string>(), s, path, depth);
  if (!t->is_array() || t->empty())
    throw JsonSchemaError(join_path(path, "type"),
                          fmt::format("'{}' must be a type name or a non-empty list of them",
                                      join_path(path, "type")));
  std::vector<Alt> alts;
  for (const auto& name : *t) {
    if (!name.is_string())
      throw JsonSchemaError(join_path(path, "type"),
                            fmt::format("'{}' must list type names", join_path(path, "type")));
    alts.push_back({ref(typed(name.get<std::string>(), s, path, depth))});
  }
  return rule(std::move(alts));
}

}  // namespace

std::shared_ptr<const Grammar> json_object_grammar() {
  SchemaCompiler c(nullptr);
  c.grammar.root = c.any_object();
  return std::make_shared<const Grammar>(std::move(c.grammar));
}

std::shared_ptr<const Grammar> json_schema_grammar(const nlohmann::ordered_json& schema) {
  SchemaCompiler c(&schema);
  c.grammar.root = c.schema(schema, "", 0);
  auto grammar = std::make_shared<const Grammar>(std::move(c.grammar));
  try {
    grammar->check_no_left_recursion();  // a $ref cycle that never reaches a byte
  } catch (const Error& e) {
    throw JsonSchemaError("$ref", fmt::format("the schema refers to itself without a value "
                                              "between: {}",
                                              e.what()));
  }
  return grammar;
}

}  // namespace retnet
