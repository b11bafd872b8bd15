#pragma once
// Structured output in a request (response_format, grammar, tools with tool_choice) as the
// library reads it (retnet/infer/structured_output.h), its errors answered as 400s naming the
// field.
#include <nlohmann/json.hpp>
#include <string>

#include "retnet/infer/structured_output.h"

namespace retnet::server {

using retnet::is_structured_output_field;
using retnet::reply_is_call;
using retnet::StructuredOutput;
using retnet::tool_calls_json;

// The library's parse_structured_output; HttpError 400 naming the field, or the schema keyword
// outside the supported subset.
StructuredOutput parse_structured_output(const nlohmann::ordered_json& body, bool chat);

// The library's history_tool_calls; HttpError 400 naming the part under `where`.
nlohmann::ordered_json history_tool_calls(const nlohmann::json& calls, const std::string& where);

}  // namespace retnet::server
