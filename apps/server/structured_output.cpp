#include "structured_output.h"

#include "openai_request.h"

namespace retnet::server {
namespace {

HttpError http_error(const StructuredOutputError& e) {
  return HttpError(400, e.what(), "invalid_request_error", e.code, e.param);
}

}  // namespace

StructuredOutput parse_structured_output(const nlohmann::ordered_json& body, bool chat) {
  try {
    return retnet::parse_structured_output(body, chat);
  } catch (const StructuredOutputError& e) {
    throw http_error(e);
  }
}

nlohmann::ordered_json history_tool_calls(const nlohmann::json& calls, const std::string& where) {
  try {
    return retnet::history_tool_calls(calls, where);
  } catch (const StructuredOutputError& e) {
    throw http_error(e);
  }
}

}  // namespace retnet::server
