// The endpoints beside generation: /tokenize, /detokenize, the slot actions and /props.
#include <fmt/format.h>

#include <algorithm>
#include <regex>

#include "http_api.h"
#include "openai_response.h"

namespace retnet::server {
namespace {

// A field these endpoints do not read is refused by name, as the completion routes do: a client
// asking for something else (add_special, ...) learns it was not done.
void refuse_other_fields(const nlohmann::json& body, std::initializer_list<const char*> known) {
  for (auto it = body.begin(); it != body.end(); ++it) {
    if (std::any_of(known.begin(), known.end(), [&](const char* k) { return it.key() == k; }))
      continue;
    throw HttpError(400, fmt::format("'{}' is not supported by this endpoint", it.key()),
                    "invalid_request_error", "unsupported_field", it.key());
  }
}

}  // namespace

// llama-server's shape where it has one (default_generation_settings, total_slots, model_path),
// then this server's limits and features; no secrets (keys, directories).
nlohmann::json HttpApi::props_json() const {
  // 0.8f as 0.8, not 0.800000011920929: the shortest decimal that reads back as the float.
  auto decimal = [](float x) { return std::stod(fmt::format("{}", x)); };
  const SamplingParams d;
  const ServeOptions& o = options_;
  nlohmann::json params = {{"temperature", decimal(d.temperature)},
                           {"top_k", d.top_k},
                           {"top_p", decimal(d.top_p)},
                           {"min_p", decimal(d.min_p)},
                           {"repeat_penalty", decimal(d.repeat_penalty)},
                           {"repeat_last_n", d.repeat_last_n},
                           {"presence_penalty", decimal(d.presence_penalty)},
                           {"frequency_penalty", decimal(d.frequency_penalty)},
                           {"max_tokens", o.max_tokens},
                           {"n_predict", o.max_tokens}};
  return {{"model", model_id_},
          {"model_path", o.model},
          {"model_meta", model_json()["meta"]},
          {"total_slots", o.parallel},
          {"default_generation_settings", {{"params", params}}},
          {"chat_template_origin", chat_.origin()},
          {"dtype", o.dtype},
          {"threads", o.threads},
          {"prefill_block", scheduler_.prefill_block()},
          {"prefill_batch", o.prefill_batch == kPrefillBatchAuto
                                ? nlohmann::json("auto")
                                : nlohmann::json(o.prefill_batch)},
          {"limits",
           {{"max_tokens", o.max_tokens},
            {"max_n", o.max_n},
            {"max_prompt_tokens", o.max_prompt_tokens},
            {"max_prompt_bytes", o.max_prompt_bytes},
            {"max_queue", o.max_queue},
            {"max_body_mib", o.max_body_mib},
            {"timeout_s", o.timeout_s},
            {"read_timeout_s", o.read_timeout_s},
            {"max_connections", o.max_connections},
            {"max_connections_per_client", o.max_connections_per_client}}},
          {"prompt_cache",
           {{"state_cache_mib", o.state_cache_mib},
            {"disk", !o.cache_dir.empty()},
            {"cache_dir_mib", o.cache_dir_mib},
            {"cache_type", o.cache_type}}},
          {"api_key_required", !o.api_keys.empty()},
          {"cors_origins", o.cors_origins},
          {"slot_save", !o.slot_save_dir.empty()},
          {"ui", !o.no_ui},
          {"log_prompts", o.log_prompts}};
}

void HttpApi::tokenize(const httplib::Request& req, httplib::Response& res) {
  const nlohmann::json body = parse_json_object(req.body);
  refuse_other_fields(body, {"content", "with_pieces"});
  auto it = body.find("content");
  if (it == body.end() || !it->is_string())
    throw HttpError(400, "'content' must be a string", "invalid_request_error", "invalid_value",
                    "content");
  const std::string text = it->get<std::string>();
  check_text_size(text, "content");
  try {
    check_encodable(tokenizer_, text, "content");
  } catch (const Error& e) {
    throw HttpError(400, e.what(), "invalid_request_error", "invalid_value", "content");
  }
  bool with_pieces = false;
  if (auto wp = body.find("with_pieces"); wp != body.end()) {
    if (!wp->is_boolean())
      throw HttpError(400, "'with_pieces' must be true or false", "invalid_request_error",
                      "invalid_value", "with_pieces");
    with_pieces = wp->get<bool>();
  }
  const std::vector<int32_t> ids = tokenizer_.encode(text);
  if (!with_pieces)
    return res.set_content(json_text(nlohmann::json({{"tokens", ids}})), "application/json");
  // llama-server's shape: each token's bytes as text, or as a list of bytes where they are not
  // UTF-8 on their own (a part of a character).
  nlohmann::json tokens = nlohmann::json::array();
  for (int32_t id : ids) {
    const std::string bytes = tokenizer_.token_bytes(id);
    nlohmann::json piece = nlohmann::json::array();
    if (utf8_valid(bytes))
      piece = bytes;
    else
      for (unsigned char c : bytes) piece.push_back(static_cast<int>(c));
    tokens.push_back({{"id", id}, {"piece", piece}});
  }
  res.set_content(json_text(nlohmann::json({{"tokens", tokens}})), "application/json");
}

void HttpApi::detokenize(const httplib::Request& req, httplib::Response& res) {
  const nlohmann::json body = parse_json_object(req.body);
  refuse_other_fields(body, {"tokens"});
  auto it = body.find("tokens");
  if (it == body.end() || !it->is_array())
    throw HttpError(400, "'tokens' must be a list of token ids", "invalid_request_error",
                    "invalid_value", "tokens");
  if (static_cast<int64_t>(it->size()) > options_.max_prompt_bytes)
    throw HttpError(
        413,
        fmt::format("'tokens' holds {} ids, more than the server's --max-prompt-bytes {}",
                    it->size(), options_.max_prompt_bytes),
        "invalid_request_error", "too_long", "tokens");
  std::vector<int32_t> ids;
  for (size_t i = 0; i < it->size(); ++i) {
    const auto& t = (*it)[i];
    if (!t.is_number_integer() || t.get<int64_t>() < 0 ||
        t.get<int64_t>() >= tokenizer_.vocab_size())
      throw HttpError(
          400,
          fmt::format("'tokens[{}]' must be a token id in [0, {})", i, tokenizer_.vocab_size()),
          "invalid_request_error", "invalid_value", fmt::format("tokens[{}]", i));
    ids.push_back(static_cast<int32_t>(t.get<int64_t>()));
  }
  res.set_content(json_text(nlohmann::json({{"content", utf8_sanitize(tokenizer_.decode(ids))}})),
                  "application/json");
}

void HttpApi::slot_action(const httplib::Request& req, httplib::Response& res) {
  int64_t id = 0;
  try {
    id = std::stoll(req.matches[1].str());
  } catch (const std::exception&) {
    throw HttpError(400, "the slot id is not a number", "invalid_request_error", "invalid_value");
  }
  const std::string action = req.get_param_value("action");
  if (action != "save" && action != "restore" && action != "erase")
    throw HttpError(400, fmt::format("'action' must be save, restore or erase, got '{}'", action),
                    "invalid_request_error", "invalid_value", "action");
  if (action == "erase")
    return res.set_content(json_text(scheduler_.erase_slot(id)), "application/json");
  if (options_.slot_save_dir.empty())
    throw HttpError(400, "saving and restoring slots needs the server's --slot-save-dir",
                    "invalid_request_error", "slot_save_disabled");
  const nlohmann::json body = parse_json_object(req.body);
  auto it = body.find("filename");
  // Plain names only: the file stays inside --slot-save-dir.
  static const std::regex plain_name(R"([A-Za-z0-9_][A-Za-z0-9._-]{0,127})");
  if (it == body.end() || !it->is_string() || !std::regex_match(it->get<std::string>(), plain_name))
    throw HttpError(400,
                    "'filename' must be a plain file name (letters, digits, '.', '_', '-'; no "
                    "path), saved inside --slot-save-dir",
                    "invalid_request_error", "invalid_value", "filename");
  const std::string path = options_.slot_save_dir + "/" + it->get<std::string>();
  nlohmann::json out =
      action == "save" ? scheduler_.save_slot(id, path) : scheduler_.restore_slot(id, path);
  out["filename"] = it->get<std::string>();
  res.set_content(json_text(out), "application/json");
}

}  // namespace retnet::server
