#pragma once
// Structured output in a request: response_format ({"type": "json_object"} or "json_schema"),
// tools with tool_choice, and llama-server's GBNF `grammar`, read into the grammar that masks the
// output token by token (retnet/infer/json_schema.h, gbnf.h) and what the reply reports. tool_choice "required" or a named
// function constrains the output to {"name": ..., "arguments": {...}} with the function's
// parameters schema and replies with message.tool_calls; "none" ignores the tools; "auto" (also
// the default when tools are given) is refused: a model that may answer in prose or call a tool
// is not something this server can promise to parse.
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "retnet/infer/grammar.h"

namespace retnet::server {

struct StructuredOutput {
  std::shared_ptr<const Grammar> grammar;  // null: free text
  bool tool_call = false;                  // the output is a call: reply with message.tool_calls
  nlohmann::ordered_json tools;            // for the chat template's `tools`; null: none
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

// OpenAI's message.tool_calls for the call the model wrote (`text` matched the tool grammar):
// [{"id", "type": "function", "function": {"name", "arguments": "<JSON text>"}}], each with
// "index" when `with_index` (stream deltas).
nlohmann::json tool_calls_json(const std::string& text, bool with_index);

}  // namespace retnet::server
