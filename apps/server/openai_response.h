#pragma once
// OpenAI response shapes: chat.completion / text_completion objects, their stream chunks, usage
// and log-probabilities.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "job.h"
#include "retnet/retnet.h"

namespace retnet::server {

struct ResponseContext {
  std::string id;  // "chatcmpl-N" or "cmpl-N"
  int64_t created = 0;
  std::string model;
  bool chat = false;
  // The request's sampling seed (given, or picked by the server), as the request's integer: a
  // negative seed a client gave is reported as given.
  int64_t seed = 0;
};

struct Usage {
  int64_t prompt_tokens = 0, cached_tokens = 0, completion_tokens = 0;
  // Speculative decoding (the extension object usage.speculative, when it was on).
  bool speculative = false;
  int64_t checks = 0, drafted_tokens = 0, accepted_tokens = 0;
};

nlohmann::json usage_json(const Usage& usage);

// llama-server's `timings`: prompt tokens read (cached ones apart) and the time from taking the
// prompt up to its last token read; tokens generated (every choice) and the time from there to
// the last one.
struct Timings {
  int64_t cache_n = 0, prompt_n = 0, predicted_n = 0;
  double prompt_ms = 0, predicted_ms = 0;
};

// The job's timings so far (under its lock).
Timings job_timings(const Job& job);
nlohmann::json timings_json(const Timings& timings);

// OpenAI's finish_reason for why a sequence ended: "stop" (a stop string or the end-of-sequence
// token) or "length".
const char* openai_finish_reason(FinishReason reason);

// `j` as compact JSON text. Invalid UTF-8 in a string becomes U+FFFD instead of throwing: request
// bytes are validated before they get here, and a response must never end the process.
std::string json_text(const nlohmann::json& j);

// Log-probabilities in the endpoint's format; `text_offset` (completions) runs across calls.
nlohmann::json logprobs_json(const std::vector<TokenLogprob>& logprobs, const Tokenizer& tokenizer,
                             bool chat, int64_t* text_offset);

// One choice of a whole response: its text, why it ended, its log-probabilities or null.
struct ChoiceResult {
  std::string text, finish_reason;
  nlohmann::json logprobs;
};

// The whole (non-streamed) response; choice i is index i.
nlohmann::json completion_json(const ResponseContext& ctx, const std::vector<ChoiceResult>& choices,
                               const Usage& usage);

// One SSE chunk's object for choice `index`: `text` (for chat, `first` adds the assistant role), a
// finish reason or null, log-probabilities or null.
nlohmann::json chunk_json(const ResponseContext& ctx, const std::string& text, bool first,
                          const nlohmann::json& finish_reason, const nlohmann::json& logprobs,
                          int64_t index = 0);

// The last chunk with stream_options.include_usage: no choices, the usage.
nlohmann::json usage_chunk_json(const ResponseContext& ctx, const Usage& usage);

}  // namespace retnet::server
