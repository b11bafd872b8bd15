#pragma once
// Parsing JSON that comes from outside (files, requests, command lines) within limits: nesting is
// bounded (nlohmann's dump and error formatting recurse, so a body nested 100,000 deep would
// overflow the stack long after parsing), and a number JSON can write but a double cannot hold
// (1e400) is an error naming where it stands ("messages[0].max_tokens"), like any syntax error.
#include <nlohmann/json.hpp>

#include "retnet/core/error.h"

#include <string>
#include <string_view>

namespace retnet {

// Deepest nesting of arrays and objects accepted. Real configs, tokenizers, templates' messages and
// requests stay under 20.
inline constexpr int kMaxJsonDepth = 128;

// Why a parse failed, for callers that answer in their own words (the server's 400s).
struct JsonParseFailure {
  std::string reason;  // "nested deeper than 128 levels", "number 1e400 is out of range", ...
  std::string path;    // where: "messages[0].max_tokens"; empty at the top level
  size_t byte = 0;     // offset into the text; 0 where unknown (too deep)
};

class JsonParseError : public Error {
 public:
  JsonParseError(const std::string& message, JsonParseFailure failure)
      : Error(message), failure_(std::move(failure)) {}
  const JsonParseFailure& failure() const { return failure_; }

 private:
  JsonParseFailure failure_;
};

// The parsed value. On failure throws JsonParseError (a retnet::Error's message shape:
// "WHAT: not valid JSON at byte N (in 'path'): reason"), `what` naming the input ("config file
// 'c.json'", "the request body").
nlohmann::json parse_json(std::string_view text, const std::string& what,
                          int max_depth = kMaxJsonDepth);
nlohmann::ordered_json parse_ordered_json(std::string_view text, const std::string& what,
                                          int max_depth = kMaxJsonDepth);

// True when the text is one JSON value within the limits (no exception).
bool is_valid_json(std::string_view text, int max_depth = kMaxJsonDepth);

}  // namespace retnet
