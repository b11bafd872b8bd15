#pragma once
// Structured output in a request: response_format ({"type": "json_object"} or "json_schema") and
// tools with tool_choice, and llama-server's GBNF `grammar`, read into the grammar that masks
// the output token by token (retnet/infer/json_schema.h, gbnf.h) and what the reply reports.
// tool_choice "required" or a named function constrains the output to
// {"name": ..., "arguments": {...}} with the function's parameters schema and replies with
// message.tool_calls; "none" ignores the tools. "auto" (the default when tools are given) lets
// the model choose, in a way that always parses: a reply whose first byte is '{' is a call and
// is held to the call grammar; any other reply (or none) is prose, left free.
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "retnet/infer/grammar.h"

namespace retnet::server {

struct StructuredOutput {
  std::shared_ptr<const Grammar> grammar;  // null: free text
  bool tool_call = false;                  // the output is a call: reply with message.tool_calls
  // The call's own grammar, with tools offered ("required", a named function or "auto"): a reply
  // is a call when it finished ("stop") as a whole sentence of it. Null: no tools.
  std::shared_ptr<const Grammar> call;
  nlohmann::ordered_json tools;  // for the chat template's `tools`; null: none
};

// The fields that ask for structured output (the request parser refuses none of them).
bool is_structured_output_field(const std::string& key, bool chat);

// Reads response_format, tools and tool_choice from the body, parsed with its key order (the
// order of a schema's properties is the order they are written in). HttpError 400 naming the
// field, or the schema keyword outside the supported subset.
StructuredOutput parse_structured_output(const nlohmann::ordered_json& body, bool chat);

// An assistant message's tool_calls in a request's history (OpenAI's shape, `arguments` as JSON
// text) as a chat template reads them (`arguments` as an object); HttpError 400 naming the part
// under `where` ("messages[2].tool_calls").
nlohmann::ordered_json history_tool_calls(const nlohmann::json& calls, const std::string& where);

// Whether a reply that finished with `finish_reason` is a tool call of `s` (else it is text: prose
// under "auto", or a call cut by a stop string or max_tokens).
bool reply_is_call(const StructuredOutput& s, const std::string& text,
                   const std::string& finish_reason);

// OpenAI's message.tool_calls for the call the model wrote (`text` matched the tool grammar):
// [{"id", "type": "function", "function": {"name", "arguments": "<JSON text>"}}], each with
// "index" when `with_index` (stream deltas).
nlohmann::json tool_calls_json(const std::string& text, bool with_index);

}  // namespace retnet::server
