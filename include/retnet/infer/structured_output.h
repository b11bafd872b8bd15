#pragma once
// Structured output asked for as OpenAI's API and llama-server ask for it, read into the grammar
// that masks the output token by token (retnet/infer/json_schema.h, gbnf.h): response_format
// ({"type": "json_object"}, optionally with a "schema" as llama-server and llama-cpp-python take
// it, or {"type": "json_schema", "json_schema": {...}}), llama-server's GBNF `grammar`, and, in a
// chat, tools with tool_choice. The server and the Python package both read requests with this.
//
// tool_choice "required" or a named function constrains the output to
// {"name": ..., "arguments": {...}} with the function's parameters schema, and the reply is a
// call (message.tool_calls); "none" ignores the tools. "auto" (the default when tools are given)
// lets the model choose, in a way that always parses: a reply whose first byte is '{' is a call
// and is held to the call grammar; any other reply (or none) is prose, left free.
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "retnet/core/error.h"
#include "retnet/infer/grammar.h"

namespace retnet {

// A structured-output field that is wrong or outside what is supported. `param` names it as
// the request writes it ("response_format.json_schema.schema.properties.x.pattern",
// "tools[0].function.name"); `code` says how: invalid_value, unsupported_field,
// unsupported_schema or invalid_grammar. The message starts with the field's name.
struct StructuredOutputError : Error {
  StructuredOutputError(std::string param, std::string code, const std::string& message)
      : Error(message), param(std::move(param)), code(std::move(code)) {}
  std::string param, code;
};

struct StructuredOutput {
  std::shared_ptr<const Grammar> grammar;  // null: free text
  bool tool_call = false;                  // the output is a call: reply with tool_calls
  // The call's own grammar, with tools offered ("required", a named function or "auto"): a reply
  // is a call when it finished ("stop") as a whole sentence of it. Null: no tools.
  std::shared_ptr<const Grammar> call;
  nlohmann::ordered_json tools;  // for the chat template's `tools`; null: none
  // Whether a chat template's turn-end strings may end the reply: free text and prose under
  // "auto" (a turn-end string inside a JSON string must not cut structured output).
  bool prose_may_stop() const { return !grammar || (call && !tool_call); }
};

// The fields that ask for structured output: response_format and grammar, and in a chat tools,
// tool_choice and parallel_tool_calls.
bool is_structured_output_field(const std::string& key, bool chat);

// Reads those fields of a request (other keys are left alone), parsed with its key order (the
// order of a schema's properties is the order they are written in). StructuredOutputError
// naming the field, or the schema keyword outside the supported subset.
StructuredOutput parse_structured_output(const nlohmann::ordered_json& request, bool chat);

// An assistant message's tool_calls in a conversation (OpenAI's shape, `arguments` as JSON text)
// as a chat template reads them (`arguments` as an object); StructuredOutputError naming the
// part under `where` ("messages[2].tool_calls").
nlohmann::ordered_json history_tool_calls(const nlohmann::json& calls, const std::string& where);

// Whether a reply that finished with `finish_reason` ("stop", "length", ...) is a tool call of
// `s` (else it is text: prose under "auto", or a call cut by a stop string or max_tokens).
bool reply_is_call(const StructuredOutput& s, const std::string& text,
                   const std::string& finish_reason);

// OpenAI's tool_calls for the call the model wrote (`text` matched the call grammar):
// [{"id": "call_<random>", "type": "function", "function": {"name", "arguments": "<JSON text>"}}],
// each with "index" when `with_index` (stream deltas).
nlohmann::json tool_calls_json(const std::string& text, bool with_index);

}  // namespace retnet
