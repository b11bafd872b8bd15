#include "retnet/infer/structured_output.h"

#include <fmt/format.h>

#include <mutex>
#include <random>
#include <regex>

#include "retnet/core/json_parse.h"
#include "retnet/infer/gbnf.h"
#include "retnet/infer/json_schema.h"

namespace retnet {
namespace {

using ojson = nlohmann::ordered_json;

StructuredOutputError field_error(const std::string& field, const std::string& message) {
  return StructuredOutputError(field, "invalid_value", fmt::format("'{}' {}", field, message));
}

StructuredOutputError unsupported_key(const std::string& where, const std::string& key) {
  return StructuredOutputError(where + "." + key, "unsupported_field",
                               fmt::format("'{}.{}' is not supported", where, key));
}

// Keys of `object` outside `known` are refused by name, as unknown request fields are.
void refuse_other_keys(const ojson& object, const std::string& where,
                       std::initializer_list<const char*> known) {
  for (auto it = object.begin(); it != object.end(); ++it) {
    bool ok = false;
    for (const char* k : known) ok |= it.key() == k;
    if (!ok) throw unsupported_key(where, it.key());
  }
}

// The schema's grammar; a keyword outside the subset is refused naming it under `where`.
std::shared_ptr<const Grammar> compile_schema(const ojson& schema, const std::string& where) {
  try {
    return json_schema_grammar(schema);
  } catch (const JsonSchemaError& e) {
    const std::string param = e.path.empty() ? where : where + "." + e.path;
    throw StructuredOutputError(param, "unsupported_schema", fmt::format("{}: {}", where, e.what()));
  }
}

std::shared_ptr<const Grammar> response_format_grammar(const ojson& format) {
  if (!format.is_object() || !format.contains("type") || !format["type"].is_string())
    throw field_error("response_format",
                      "must be an object with a \"type\" (text, json_object or json_schema)");
  const std::string type = format["type"].get<std::string>();
  if (type == "text") {
    refuse_other_keys(format, "response_format", {"type"});
    return nullptr;
  }
  if (type == "json_object") {
    // llama-server's and llama-cpp-python's form may carry the object's schema.
    refuse_other_keys(format, "response_format", {"type", "schema"});
    auto schema = format.find("schema");
    if (schema == format.end() || schema->is_null()) return json_object_grammar();
    if (!schema->is_object() && !schema->is_boolean())
      throw field_error("response_format.schema", "must be a JSON schema");
    return compile_schema(*schema, "response_format.schema");
  }
  if (type != "json_schema")
    throw field_error("response_format.type",
                      fmt::format("must be text, json_object or json_schema, got '{}'", type));
  refuse_other_keys(format, "response_format", {"type", "json_schema"});
  auto spec = format.find("json_schema");
  if (spec == format.end() || !spec->is_object())
    throw field_error("response_format.json_schema",
                      "must be an object with \"name\" and \"schema\"");
  refuse_other_keys(*spec, "response_format.json_schema",
                    {"name", "schema", "strict", "description"});
  auto name = spec->find("name");
  if (name != spec->end() && !name->is_string())
    throw field_error("response_format.json_schema.name", "must be a string");
  auto strict = spec->find("strict");
  if (strict != spec->end() && !strict->is_boolean() && !strict->is_null())
    throw field_error("response_format.json_schema.strict", "must be a boolean");
  auto schema = spec->find("schema");
  if (schema == spec->end() || !(schema->is_object() || schema->is_boolean()))
    throw field_error("response_format.json_schema.schema", "must be a JSON schema");
  return compile_schema(*schema, "response_format.json_schema.schema");
}

struct ToolFunction {
  std::string name;
  ojson parameters;  // the arguments' schema
};

std::vector<ToolFunction> tools_field(const ojson& tools) {
  if (!tools.is_array() || tools.empty())
    throw field_error("tools", "must be a non-empty list of functions");
  static const std::regex name_pattern("[A-Za-z0-9_-]{1,64}");
  std::vector<ToolFunction> out;
  for (size_t i = 0; i < tools.size(); ++i) {
    const std::string at = fmt::format("tools[{}]", i);
    const ojson& tool = tools[i];
    if (!tool.is_object() || tool.value("type", ojson()) != "function" ||
        !tool.contains("function") || !tool["function"].is_object())
      throw field_error(at, "must be {\"type\": \"function\", \"function\": {...}}");
    refuse_other_keys(tool, at, {"type", "function"});
    const ojson& f = tool["function"];
    refuse_other_keys(f, at + ".function", {"name", "description", "parameters", "strict"});
    if (!f.contains("name") || !f["name"].is_string() ||
        !std::regex_match(f["name"].get<std::string>(), name_pattern))
      throw field_error(at + ".function.name", "must be 1 to 64 letters, digits, '_' or '-'");
    ToolFunction fn{f["name"].get<std::string>(), ojson::object()};
    for (const auto& other : out)
      if (other.name == fn.name)
        throw field_error(at + ".function.name",
                          fmt::format("'{}' names a function twice", fn.name));
    // No parameters: a function that takes none.
    fn.parameters = f.contains("parameters") && !f["parameters"].is_null()
                        ? f["parameters"]
                        : ojson({{"type", "object"}, {"properties", ojson::object()}});
    compile_schema(fn.parameters, at + ".function.parameters");  // refused by its own path
    out.push_back(std::move(fn));
  }
  return out;
}

// {"name": <one of the functions>, "arguments": <its parameters>}, in that order.
std::shared_ptr<const Grammar> tool_call_grammar(const std::vector<ToolFunction>& functions) {
  ojson choices = ojson::array();
  for (const auto& f : functions)
    choices.push_back({{"type", "object"},
                       {"properties", {{"name", {{"const", f.name}}}, {"arguments", f.parameters}}},
                       {"required", {"name", "arguments"}},
                       {"additionalProperties", false}});
  return compile_schema(choices.size() == 1 ? choices[0] : ojson({{"anyOf", choices}}), "tools");
}

// tool_choice "auto": (a call) | "" | a first byte other than '{', then any bytes. The choice is
// made at the first byte, so every reply parses one way or the other.
std::shared_ptr<const Grammar> call_or_text(const Grammar& call) {
  Grammar g = call;
  const Grammar::ByteSet any = Grammar::bytes_in(0, 255);
  Grammar::ByteSet first = any;
  first['{' >> 6] &= ~(uint64_t{1} << ('{' & 63));
  const int32_t tail = g.add_rule();
  g.rules[static_cast<size_t>(tail)] = {Grammar::Alternative{},
                                        {g.set_element(any), Grammar::rule_element(tail)}};
  const int32_t root = g.add_rule();
  g.rules[static_cast<size_t>(root)] = {{Grammar::rule_element(call.root)},
                                        Grammar::Alternative{},
                                        {g.set_element(first), Grammar::rule_element(tail)}};
  g.root = root;
  return std::make_shared<const Grammar>(std::move(g));
}

std::string call_id() {
  static std::mutex mutex;
  static std::mt19937_64 rng{std::random_device{}()};
  std::lock_guard<std::mutex> lock(mutex);
  return fmt::format("call_{:016x}", rng());
}

// llama-server's `grammar` (GBNF text), alone: with a JSON format or tools there would be two
// grammars for one output.
StructuredOutput grammar_field(const ojson& request, bool has_format, bool chat) {
  const ojson& text = request["grammar"];
  if (!text.is_string()) throw field_error("grammar", "must be a string (GBNF)");
  if (has_format) throw field_error("grammar", "cannot be combined with a JSON response_format");
  if (chat && request.contains("tools") && !request["tools"].is_null())
    throw field_error("grammar", "cannot be combined with tools");
  StructuredOutput out;
  try {
    out.grammar = parse_gbnf(text.get<std::string>());
  } catch (const GbnfError& e) {
    throw StructuredOutputError("grammar", "invalid_grammar",
                                fmt::format("'grammar': {}", e.what()));
  }
  return out;
}

}  // namespace

nlohmann::ordered_json history_tool_calls(const nlohmann::json& calls, const std::string& where) {
  if (!calls.is_array() || calls.empty())
    throw field_error(where, "must be a non-empty list of tool calls");
  ojson out = ojson::array();
  for (size_t i = 0; i < calls.size(); ++i) {
    const std::string at = fmt::format("{}[{}]", where, i);
    const nlohmann::json& c = calls[i];
    if (!c.is_object() || !c.contains("function") || !c["function"].is_object() ||
        !c["function"].contains("name") || !c["function"]["name"].is_string() ||
        !c["function"].contains("arguments") || !c["function"]["arguments"].is_string())
      throw field_error(at,
                        "must be {\"id\", \"type\": \"function\", \"function\": {\"name\", "
                        "\"arguments\": \"<JSON text>\"}}");
    for (auto key = c.begin(); key != c.end(); ++key)
      if (key.key() != "id" && key.key() != "type" && key.key() != "function")
        throw unsupported_key(at, key.key());
    if (c.contains("type") && c["type"] != "function")
      throw field_error(at + ".type", "must be \"function\"");
    if (c.contains("id") && !c["id"].is_string()) throw field_error(at + ".id", "must be a string");
    ojson arguments;
    try {
      arguments = parse_ordered_json(c["function"]["arguments"].get<std::string>(),
                                     at + ".function.arguments");
    } catch (const JsonParseError& e) {
      throw field_error(at + ".function.arguments",
                        fmt::format("must be JSON text: {}", e.failure().reason));
    }
    ojson call = {{"id", c.value("id", std::string())},
                  {"type", "function"},
                  {"function", {{"name", c["function"]["name"]}, {"arguments", arguments}}}};
    out.push_back(std::move(call));
  }
  return out;
}

bool is_structured_output_field(const std::string& key, bool chat) {
  return key == "response_format" || key == "grammar" ||
         (chat && (key == "tools" || key == "tool_choice" || key == "parallel_tool_calls"));
}

StructuredOutput parse_structured_output(const ojson& request, bool chat) {
  StructuredOutput out;
  auto present = [&](const char* key) { return request.contains(key) && !request[key].is_null(); };
  if (present("response_format"))
    out.grammar = response_format_grammar(request["response_format"]);
  if (present("grammar")) return grammar_field(request, out.grammar != nullptr, chat);
  if (!chat) return out;
  if (!present("tools")) {
    if (present("tool_choice")) throw field_error("tool_choice", "needs \"tools\" to choose from");
    return out;
  }
  const std::vector<ToolFunction> functions = tools_field(request["tools"]);
  if (present("parallel_tool_calls") && !request["parallel_tool_calls"].is_boolean())
    throw field_error("parallel_tool_calls", "must be a boolean");
  std::vector<ToolFunction> callable;
  const ojson choice = present("tool_choice") ? request["tool_choice"] : ojson("auto");
  if (choice == "none") return out;  // the tools are not offered at all
  if (choice == "required") {
    callable = functions;
  } else if (choice.is_object() && choice.value("type", ojson()) == "function" &&
             choice.contains("function") && choice["function"].is_object() &&
             choice["function"].contains("name")) {
    for (const auto& f : functions)
      if (choice["function"]["name"] == f.name) callable = {f};
    if (callable.empty())
      throw field_error("tool_choice.function.name", "must name a function in tools");
  } else if (choice == "auto") {
    callable = functions;
  } else {
    throw field_error("tool_choice",
                      "must be none, auto, required or {\"type\": \"function\", "
                      "\"function\": {\"name\": ...}}");
  }
  if (out.grammar)
    throw field_error("response_format",
                      "cannot be combined with tools (the output may be a call)");
  out.call = tool_call_grammar(callable);
  out.tool_call = choice != "auto";
  out.grammar = out.tool_call ? out.call : call_or_text(*out.call);
  out.tools = request["tools"];
  return out;
}

bool reply_is_call(const StructuredOutput& s, const std::string& text,
                   const std::string& finish_reason) {
  return s.call && finish_reason == "stop" && GrammarRecognizer(s.call).matches(text);
}

nlohmann::json tool_calls_json(const std::string& text, bool with_index) {
  const ojson call = ojson::parse(text);
  nlohmann::json out = {
      {"id", call_id()},
      {"type", "function"},
      {"function",
       {{"name", call["name"].get<std::string>()}, {"arguments", call["arguments"].dump()}}}};
  if (with_index) out["index"] = 0;
  return nlohmann::json::array({out});
}

}  // namespace retnet
