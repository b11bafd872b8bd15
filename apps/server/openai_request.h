#pragma once
// OpenAI request bodies -> what the scheduler needs, with every bad field answered by a 400 that
// names it, and OpenAI's error format {"error": {"message", "type", "param", "code"}}.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "chat_prompt.h"
#include "retnet/retnet.h"
#include "structured_output.h"

namespace retnet::server {

// A request the server refuses: the HTTP status and OpenAI's error fields.
struct HttpError : std::runtime_error {
  HttpError(int status, const std::string& message, std::string type = "invalid_request_error",
            std::string code = "", std::string param = "")
      : std::runtime_error(message),
        status(status),
        type(std::move(type)),
        code(std::move(code)),
        param(std::move(param)) {}
  int status;
  std::string type, code, param;
};

nlohmann::json error_json(const std::string& message, const std::string& type,
                          const std::string& code = "", const std::string& param = "");

// The body as a JSON object: invalid UTF-8, malformed JSON and non-objects are 400s.
nlohmann::json parse_json_object(const std::string& body);

struct CompletionRequest {
  bool chat = false;
  bool stream = false, include_usage = false;
  std::string prompt_text;             // completions: the prompt as text (when not token ids)
  std::vector<int32_t> prompt_tokens;  // completions: the prompt as token ids, if given so
  bool prompt_is_tokens = false;
  std::vector<ChatMessage> messages;  // chat
  int64_t n = 1;                      // choices
  int64_t max_tokens = 0;
  SamplingParams sampling;
  bool seed_given = false;
  std::vector<std::string> stop;
  bool ignore_eos = false;
  int top_logprobs = -1;  // -1: no log-probabilities
  std::vector<std::pair<int32_t, float>> logit_bias;  // (token, added to its logit)
  StructuredOutput structured;  // response_format, tools (parse_structured_output)
  // The extension object "speculative": {"lookup", "draft_max"}; -1: the server's setting.
  int64_t lookup = -1, draft_max = -1;
};

struct RequestLimits {
  int64_t max_tokens = 0;  // the most a request generates (and the default)
  int64_t vocab = 0;       // token ids must be below it
  int64_t max_n = 1;       // the most choices a request may ask for (--max-n)
  int64_t slots = 1;       // each choice decodes in a slot of its own (--parallel)
};

CompletionRequest parse_completion_request(const nlohmann::json& body, bool chat,
                                           const RequestLimits& limits);

}  // namespace retnet::server
