#include "openai_response.h"

#include <chrono>

namespace retnet::server {
namespace {

std::string token_text(const Tokenizer& tokenizer, int32_t token) {
  return utf8_sanitize(tokenizer.token_bytes(token));
}

nlohmann::json token_bytes_json(const Tokenizer& tokenizer, int32_t token) {
  nlohmann::json bytes = nlohmann::json::array();
  for (unsigned char c : tokenizer.token_bytes(token)) bytes.push_back(static_cast<int>(c));
  return bytes;
}

}  // namespace

std::string json_text(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

const char* openai_finish_reason(FinishReason reason) {
  return reason == FinishReason::Length ? "length" : "stop";
}

nlohmann::json usage_json(const Usage& u) {
  nlohmann::json out = {{"prompt_tokens", u.prompt_tokens},
                        {"completion_tokens", u.completion_tokens},
                        {"total_tokens", u.prompt_tokens + u.completion_tokens},
                        {"prompt_tokens_details", {{"cached_tokens", u.cached_tokens}}}};
  if (u.speculative)
    out["speculative"] = {{"checks", u.checks},
                          {"drafted_tokens", u.drafted_tokens},
                          {"accepted_tokens", u.accepted_tokens}};
  return out;
}

Timings job_timings(const Job& job) {
  auto ms = [](Clock::time_point from, Clock::time_point to) {
    return from == Clock::time_point() || to < from
               ? 0.0
               : std::chrono::duration<double, std::milli>(to - from).count();
  };
  Timings t;
  t.cache_n = job.cached_tokens;
  t.prompt_n = job.prompt_tokens - job.cached_tokens;
  for (const ChoiceOutput& c : job.choices) t.predicted_n += c.completion_tokens;
  t.prompt_ms = ms(job.prompt_started, job.prompt_done);
  t.predicted_ms = ms(job.prompt_done, job.last_token);
  return t;
}

nlohmann::json timings_json(const Timings& t) {
  // Rates of nothing, or over no time, are 0 rather than infinite.
  auto per_token = [](double ms, int64_t n) { return n > 0 ? ms / static_cast<double>(n) : 0.0; };
  auto per_second = [](double ms, int64_t n) {
    return ms > 0 ? 1e3 * static_cast<double>(n) / ms : 0.0;
  };
  return {{"cache_n", t.cache_n},
          {"prompt_n", t.prompt_n},
          {"prompt_ms", t.prompt_ms},
          {"prompt_per_token_ms", per_token(t.prompt_ms, t.prompt_n)},
          {"prompt_per_second", per_second(t.prompt_ms, t.prompt_n)},
          {"predicted_n", t.predicted_n},
          {"predicted_ms", t.predicted_ms},
          {"predicted_per_token_ms", per_token(t.predicted_ms, t.predicted_n)},
          {"predicted_per_second", per_second(t.predicted_ms, t.predicted_n)}};
}

nlohmann::json logprobs_json(const std::vector<TokenLogprob>& logprobs, const Tokenizer& tokenizer,
                             bool chat, int64_t* text_offset) {
  if (chat) {
    nlohmann::json content = nlohmann::json::array();
    for (const auto& lp : logprobs) {
      nlohmann::json top = nlohmann::json::array();
      for (const auto& [id, value] : lp.top)
        top.push_back({{"token", token_text(tokenizer, id)},
                       {"logprob", value},
                       {"bytes", token_bytes_json(tokenizer, id)}});
      content.push_back({{"token", token_text(tokenizer, lp.token)},
                         {"logprob", lp.logprob},
                         {"bytes", token_bytes_json(tokenizer, lp.token)},
                         {"top_logprobs", top}});
    }
    return {{"content", content}};
  }
  nlohmann::json tokens = nlohmann::json::array(), values = nlohmann::json::array(),
                 tops = nlohmann::json::array(), offsets = nlohmann::json::array();
  for (const auto& lp : logprobs) {
    tokens.push_back(token_text(tokenizer, lp.token));
    values.push_back(lp.logprob);
    nlohmann::json top = nlohmann::json::object();
    for (const auto& [id, value] : lp.top) top[token_text(tokenizer, id)] = value;
    tops.push_back(top);
    offsets.push_back(*text_offset);
    *text_offset += static_cast<int64_t>(tokenizer.token_bytes(lp.token).size());
  }
  return {{"tokens", tokens},
          {"token_logprobs", values},
          {"top_logprobs", tops},
          {"text_offset", offsets}};
}

namespace {

// What every response object and chunk starts with; `seed` is the request's random stream (the
// one the server picked when the request named none), so that any reply can be reproduced.
nlohmann::json envelope(const ResponseContext& ctx, const char* object) {
  return {{"id", ctx.id},
          {"object", object},
          {"created", ctx.created},
          {"model", ctx.model},
          {"seed", ctx.seed}};
}

}  // namespace

nlohmann::json completion_json(const ResponseContext& ctx, const std::vector<ChoiceResult>& choices,
                               const Usage& usage) {
  nlohmann::json list = nlohmann::json::array();
  for (size_t i = 0; i < choices.size(); ++i) {
    const ChoiceResult& c = choices[i];
    nlohmann::json choice = {{"index", static_cast<int64_t>(i)},
                             {"logprobs", c.logprobs},
                             {"finish_reason", c.finish_reason}};
    if (ctx.chat)
      choice["message"] = {{"role", "assistant"}, {"content", c.text}};
    else
      choice["text"] = c.text;
    list.push_back(std::move(choice));
  }
  nlohmann::json out = envelope(ctx, ctx.chat ? "chat.completion" : "text_completion");
  out["choices"] = std::move(list);
  out["usage"] = usage_json(usage);
  return out;
}

nlohmann::json chunk_json(const ResponseContext& ctx, const std::string& text, bool first,
                          const nlohmann::json& finish_reason, const nlohmann::json& logprobs,
                          int64_t index) {
  nlohmann::json choice = {
      {"index", index}, {"logprobs", logprobs}, {"finish_reason", finish_reason}};
  if (ctx.chat) {
    nlohmann::json delta = nlohmann::json::object();
    if (first) delta["role"] = "assistant";
    if (!text.empty() || first) delta["content"] = text;
    choice["delta"] = delta;
  } else {
    choice["text"] = text;
  }
  nlohmann::json out = envelope(ctx, ctx.chat ? "chat.completion.chunk" : "text_completion");
  out["choices"] = nlohmann::json::array({choice});
  return out;
}

nlohmann::json usage_chunk_json(const ResponseContext& ctx, const Usage& usage) {
  nlohmann::json out = envelope(ctx, ctx.chat ? "chat.completion.chunk" : "text_completion");
  out["choices"] = nlohmann::json::array();
  out["usage"] = usage_json(usage);
  return out;
}

}  // namespace retnet::server
