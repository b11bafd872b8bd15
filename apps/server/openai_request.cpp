#include "openai_request.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <iterator>

#include "retnet/core/json_parse.h"
#include "structured_output.h"

namespace retnet::server {
namespace {

HttpError bad_field(const std::string& field, const std::string& message) {
  return HttpError(400, fmt::format("'{}' {}", field, message), "invalid_request_error",
                   "invalid_value", field);
}

const char* type_name(const nlohmann::json& v) { return v.type_name(); }

// A field that is absent or null reads as not given.
const nlohmann::json* field(const nlohmann::json& body, const char* name) {
  auto it = body.find(name);
  if (it == body.end() || it->is_null()) return nullptr;
  return &*it;
}

double number_field(const nlohmann::json& body, const char* name, double lo, double hi,
                    double fallback) {
  const nlohmann::json* v = field(body, name);
  if (!v) return fallback;
  if (!v->is_number())
    throw bad_field(name, fmt::format("must be a number, got {}", type_name(*v)));
  const double x = v->get<double>();
  if (!std::isfinite(x) || x < lo || x > hi)
    throw bad_field(name, fmt::format("must be a number in [{}, {}], got {}", lo, hi, x));
  return x;
}

int64_t integer_field(const nlohmann::json& body, const char* name, int64_t lo, int64_t hi,
                      int64_t fallback) {
  const nlohmann::json* v = field(body, name);
  if (!v) return fallback;
  // A whole number past 64 bits (1e20, 2^70) parses as a double: out of range, not a fraction.
  if (v->is_number_float() && std::isfinite(v->get<double>()) &&
      v->get<double>() == std::floor(v->get<double>()))
    throw bad_field(
        name, fmt::format("must be an integer in [{}, {}], got {}", lo, hi, v->get<double>()));
  if (!v->is_number_integer())
    throw bad_field(name, fmt::format("must be an integer, got {}", type_name(*v)));
  if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
    throw bad_field(
        name, fmt::format("must be an integer in [{}, {}], got {}", lo, hi, v->get<uint64_t>()));
  const int64_t x = v->get<int64_t>();
  if (x < lo || x > hi)
    throw bad_field(name, fmt::format("must be an integer in [{}, {}], got {}", lo, hi, x));
  return x;
}

bool bool_field(const nlohmann::json& body, const char* name, bool fallback) {
  const nlohmann::json* v = field(body, name);
  if (!v) return fallback;
  if (!v->is_boolean())
    throw bad_field(name, fmt::format("must be a boolean, got {}", type_name(*v)));
  return v->get<bool>();
}

std::vector<std::string> stop_field(const nlohmann::json& body) {
  const nlohmann::json* v = field(body, "stop");
  if (!v) return {};
  if (v->is_string()) return {v->get<std::string>()};
  if (!v->is_array())
    throw bad_field("stop",
                    fmt::format("must be a string or a list of strings, got {}", type_name(*v)));
  if (v->size() > 16) throw bad_field("stop", "may hold at most 16 strings");
  std::vector<std::string> out;
  for (size_t i = 0; i < v->size(); ++i) {
    if (!(*v)[i].is_string())
      throw bad_field(fmt::format("stop[{}]", i),
                      fmt::format("must be a string, got {}", type_name((*v)[i])));
    out.push_back((*v)[i].get<std::string>());
  }
  return out;
}

// Message content: a string, or a list of {"type": "text", "text": ...} parts.
std::string content_text(const nlohmann::json& content, const std::string& where) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array())
    throw bad_field(
        where, fmt::format("must be a string or a list of text parts, got {}", type_name(content)));
  std::string text;
  for (size_t i = 0; i < content.size(); ++i) {
    const auto& part = content[i];
    const std::string at = fmt::format("{}[{}]", where, i);
    if (!part.is_object() || part.value("type", nlohmann::json()) != "text" ||
        !part.contains("text") || !part["text"].is_string())
      throw bad_field(at,
                      "must be {\"type\": \"text\", \"text\": \"...\"} (only text is supported)");
    text += part["text"].get<std::string>();
  }
  return text;
}

std::vector<ChatMessage> messages_field(const nlohmann::json& body) {
  const nlohmann::json* v = field(body, "messages");
  if (!v) throw bad_field("messages", "is required");
  if (!v->is_array() || v->empty())
    throw bad_field("messages", "must be a non-empty list of messages");
  std::vector<ChatMessage> out;
  for (size_t i = 0; i < v->size(); ++i) {
    const auto& m = (*v)[i];
    const std::string at = fmt::format("messages[{}]", i);
    if (!m.is_object()) throw bad_field(at, fmt::format("must be an object, got {}", type_name(m)));
    auto role = m.find("role");
    if (role == m.end() || !role->is_string())
      throw bad_field(at + ".role", "must be a string (system, user or assistant)");
    ChatMessage msg;
    msg.role = role->get<std::string>();
    if (msg.role.empty()) throw bad_field(at + ".role", "must not be empty");
    // An assistant's tool calls and a tool's result, for templates that render them.
    const char* extra = msg.role == "assistant" ? "tool_calls"
                        : msg.role == "tool"    ? "tool_call_id"
                                                : "";
    for (auto key = m.begin(); key != m.end(); ++key)
      if (key.key() != "role" && key.key() != "content" && key.key() != extra)
        throw bad_field(at + "." + key.key(), "is not supported (a message has role and content)");
    if (auto calls = m.find("tool_calls"); calls != m.end() && !calls->is_null())
      msg.tool_calls = history_tool_calls(*calls, at + ".tool_calls");
    if (auto id = m.find("tool_call_id"); id != m.end()) {
      if (!id->is_string()) throw bad_field(at + ".tool_call_id", "must be a string");
      msg.tool_call_id = id->get<std::string>();
    }
    auto content = m.find("content");
    const bool absent = content == m.end() || content->is_null();
    if (absent && msg.tool_calls.is_null()) throw bad_field(at + ".content", "is required");
    if (!absent) msg.content = content_text(*content, at + ".content");
    out.push_back(std::move(msg));
  }
  return out;
}

void prompt_field(const nlohmann::json& body, const RequestLimits& limits, CompletionRequest& r) {
  const nlohmann::json* v = field(body, "prompt");
  if (!v) throw bad_field("prompt", "is required");
  if (v->is_string()) {
    r.prompt_text = v->get<std::string>();
    return;
  }
  if (!v->is_array())
    throw bad_field("prompt",
                    fmt::format("must be a string or a list of token ids, got {}", type_name(*v)));
  if (v->size() == 1 && (*v)[0].is_string()) {  // ["text"]: one prompt in a list
    r.prompt_text = (*v)[0].get<std::string>();
    return;
  }
  r.prompt_is_tokens = true;
  for (size_t i = 0; i < v->size(); ++i) {
    const auto& t = (*v)[i];
    if (t.is_string()) throw bad_field("prompt", "holds several prompts: send one per request");
    if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= limits.vocab)
      throw bad_field(fmt::format("prompt[{}]", i),
                      fmt::format("must be a token id in [0, {})", limits.vocab));
    r.prompt_tokens.push_back(static_cast<int32_t>(t.get<int64_t>()));
  }
}

// {"token id": bias}: a bias in [-100, 100] added to the token's logit before sampling (-100
// practically bans it, 100 practically forces it).
std::vector<std::pair<int32_t, float>> logit_bias_field(const nlohmann::json& body,
                                                        const RequestLimits& limits) {
  std::vector<std::pair<int32_t, float>> out;
  const nlohmann::json* v = field(body, "logit_bias");
  if (!v) return out;
  if (!v->is_object())
    throw bad_field("logit_bias", fmt::format("must be an object, got {}", type_name(*v)));
  if (v->size() > 1024) throw bad_field("logit_bias", "may hold at most 1024 tokens");
  for (auto it = v->begin(); it != v->end(); ++it) {
    const std::string at = fmt::format("logit_bias.{}", it.key());
    const std::string& key = it.key();
    const bool digits = !key.empty() && key.size() <= 18 &&
                        key.find_first_not_of("0123456789") == std::string::npos;
    const int64_t token = digits ? std::stoll(key) : -1;
    if (token < 0 || token >= limits.vocab)
      throw bad_field(at, fmt::format("must be keyed by a token id in [0, {})", limits.vocab));
    if (!it->is_number() || !std::isfinite(it->get<double>()) || it->get<double>() < -100 ||
        it->get<double>() > 100)
      throw bad_field(at, "must be a number in [-100, 100]");
    out.emplace_back(static_cast<int32_t>(token), it->get<float>());
  }
  return out;
}

// The extension object {"lookup": N, "draft_max": K}: speculative decoding for this request
// (lookup 0: off); a key left out keeps the server's --lookup / --draft-max.
void speculative_field(const nlohmann::json& body, CompletionRequest& r) {
  const nlohmann::json* v = field(body, "speculative");
  if (!v) return;
  if (!v->is_object())
    throw bad_field("speculative", fmt::format("must be an object {{\"lookup\": N, "
                                               "\"draft_max\": K}}, got {}",
                                               type_name(*v)));
  for (auto it = v->begin(); it != v->end(); ++it)
    if (it.key() != "lookup" && it.key() != "draft_max")
      throw bad_field("speculative." + it.key(), "is not supported (only lookup and draft_max)");
  auto count = [&](const char* key, int64_t lo, int64_t& out) {
    const nlohmann::json* x = field(*v, key);
    if (!x) return;
    const bool in_range = x->is_number_integer() &&
                          !(x->is_number_unsigned() && x->get<uint64_t>() > 64) &&
                          x->get<int64_t>() >= lo && x->get<int64_t>() <= 64;
    if (!in_range)
      throw bad_field(fmt::format("speculative.{}", key),
                      fmt::format("must be an integer in [{}, 64], got {}", lo,
                                  x->is_number() ? x->dump() : type_name(*x)));
    out = x->get<int64_t>();
  };
  count("lookup", 0, r.lookup);
  count("draft_max", 1, r.draft_max);
}

// Every field of a request is read or refused by name: a field this server does not implement
// (typical_p, mirostat, ...) would change the output if honoured, so a
// client must learn that it was not.
void refuse_unknown_fields(const nlohmann::json& body, bool chat) {
  // clang-format off
  static const char* const common[] = {
      "model", "stream", "stream_options", "n", "max_tokens", "temperature", "top_p", "top_k",
      "min_p", "seed", "repeat_penalty", "repeat_last_n", "presence_penalty", "frequency_penalty",
      "stop", "ignore_eos", "logprobs", "logit_bias", "user", "speculative"};
  // clang-format on
  static const char* const chat_only[] = {"messages", "max_completion_tokens", "top_logprobs"};
  static const char* const completion_only[] = {"prompt", "echo", "suffix"};
  for (auto it = body.begin(); it != body.end(); ++it) {
    const std::string& key = it.key();
    auto known = [&](const auto& names) {
      return std::any_of(std::begin(names), std::end(names),
                         [&](const char* name) { return key == name; });
    };
    if (known(common) || (chat ? known(chat_only) : known(completion_only))) continue;
    if (is_structured_output_field(key, chat)) continue;  // read by parse_structured_output
    throw HttpError(400,
                    fmt::format("'{}' is not supported by this server (docs/server.md lists the "
                                "fields it reads)",
                                key),
                    "invalid_request_error", "unsupported_field", key);
  }
}

}  // namespace

nlohmann::json error_json(const std::string& message, const std::string& type,
                          const std::string& code, const std::string& param) {
  nlohmann::json e = {{"message", message}, {"type", type}};
  e["code"] = code.empty() ? nlohmann::json() : nlohmann::json(code);
  e["param"] = param.empty() ? nlohmann::json() : nlohmann::json(param);
  return {{"error", e}};
}

nlohmann::json parse_json_object(const std::string& body) {
  size_t bad = 0;
  if (!utf8_valid(body, &bad))
    throw HttpError(400,
                    fmt::format("the request body is not valid UTF-8 (bad byte 0x{:02x} at offset "
                                "{})",
                                static_cast<unsigned char>(body[bad]), bad),
                    "invalid_request_error", "invalid_utf8");
  nlohmann::json j;
  try {
    j = parse_json(body, "the request body");
  } catch (const JsonParseError& e) {
    throw HttpError(400, e.what(), "invalid_request_error", "invalid_json", e.failure().path);
  }
  if (!j.is_object())
    throw HttpError(400,
                    fmt::format("the request body must be a JSON object, got {}", j.type_name()),
                    "invalid_request_error", "invalid_json");
  return j;
}

CompletionRequest parse_completion_request(const nlohmann::json& body, bool chat,
                                           const RequestLimits& limits) {
  CompletionRequest r;
  r.chat = chat;
  // Any name: the server has one model (its replies name it), and clients send names of their
  // own (gpt-4o-mini); GET /v1/models says which it is.
  if (const nlohmann::json* model = field(body, "model"))
    if (!model->is_string())
      throw bad_field("model", fmt::format("must be a string, got {}", type_name(*model)));
  if (chat)
    r.messages = messages_field(body);
  else
    prompt_field(body, limits, r);
  refuse_unknown_fields(body, chat);
  r.stream = bool_field(body, "stream", false);
  if (const nlohmann::json* so = field(body, "stream_options")) {
    if (!so->is_object())
      throw bad_field("stream_options", fmt::format("must be an object, got {}", type_name(*so)));
    for (auto key = so->begin(); key != so->end(); ++key)
      if (key.key() != "include_usage")
        throw bad_field("stream_options." + key.key(), "is not supported (only include_usage)");
    r.include_usage = bool_field(*so, "include_usage", false);
  }
  r.n = integer_field(body, "n", INT64_MIN, INT64_MAX, 1);
  if (r.n < 1) throw bad_field("n", fmt::format("must be >= 1, got {}", r.n));
  if (r.n > limits.max_n)
    throw bad_field("n",
                    fmt::format("is {}, more than the server's --max-n {}", r.n, limits.max_n));
  if (r.n > limits.slots)
    throw bad_field("n", fmt::format("is {}, more than the server's {} slots (--parallel): each "
                                     "choice decodes in a slot of its own",
                                     r.n, limits.slots));
  // max_completion_tokens is the newer name in the chat API.
  const char* max_name =
      field(body, "max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
  r.max_tokens = integer_field(body, max_name, INT64_MIN, INT64_MAX, limits.max_tokens);
  if (r.max_tokens < 0)
    throw bad_field(max_name, fmt::format("must be >= 0, got {}", r.max_tokens));
  // Above the server's --max-tokens: clamped (clients send large defaults), and the reply then
  // ends with finish_reason "length" where the limit cuts it.
  r.max_tokens = std::min(r.max_tokens, limits.max_tokens);
  SamplingParams& s = r.sampling;
  s.temperature = static_cast<float>(number_field(body, "temperature", 0, 2, s.temperature));
  s.top_p = static_cast<float>(number_field(body, "top_p", 0, 1, s.top_p));
  s.top_k = integer_field(body, "top_k", 0, INT64_MAX, s.top_k);
  s.repeat_penalty =
      static_cast<float>(number_field(body, "repeat_penalty", 1e-3, 1e3, s.repeat_penalty));
  s.repeat_last_n = integer_field(body, "repeat_last_n", 0, 256, s.repeat_last_n);
  r.seed_given = field(body, "seed") != nullptr;
  s.seed = static_cast<uint64_t>(integer_field(body, "seed", INT64_MIN, INT64_MAX, 0));
  s.presence_penalty =
      static_cast<float>(number_field(body, "presence_penalty", -2, 2, s.presence_penalty));
  s.frequency_penalty =
      static_cast<float>(number_field(body, "frequency_penalty", -2, 2, s.frequency_penalty));
  s.min_p = static_cast<float>(number_field(body, "min_p", 0, 1, s.min_p));
  r.stop = stop_field(body);
  r.ignore_eos = bool_field(body, "ignore_eos", false);
  if (chat) {
    if (bool_field(body, "logprobs", false))
      r.top_logprobs = static_cast<int>(integer_field(body, "top_logprobs", 0, 20, 0));
    else if (field(body, "top_logprobs"))
      throw bad_field("top_logprobs", "needs \"logprobs\": true");
  } else {
    r.top_logprobs = static_cast<int>(integer_field(body, "logprobs", 0, 20, -1));
    if (bool_field(body, "echo", false)) throw bad_field("echo", "is not supported (only false)");
    if (const nlohmann::json* suffix = field(body, "suffix"))
      if (!suffix->is_string() || !suffix->get<std::string>().empty())
        throw bad_field("suffix", "is not supported");
  }
  r.logit_bias = logit_bias_field(body, limits);
  speculative_field(body, r);
  if (const nlohmann::json* user = field(body, "user"))
    if (!user->is_string())
      throw bad_field("user", fmt::format("must be a string, got {}", type_name(*user)));
  return r;
}

}  // namespace retnet::server
