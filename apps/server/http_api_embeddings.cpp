// POST /v1/embeddings: each input's final hidden states (after the last norm) pooled into one
// vector, normalized as llama-server does, as floats or base64.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "http_api.h"
#include "openai_response.h"
#include "retnet/core/base64.h"
#include "retnet/model/forward.h"

namespace retnet::server {
namespace {

constexpr size_t kMaxInputs = 2048;  // OpenAI's limit on a request's inputs

HttpError embedding_error(const std::string& field, const std::string& message) {
  return HttpError(400, fmt::format("'{}' {}", field, message), "invalid_request_error",
                   "invalid_value", field);
}

// A string field that takes one of `allowed` (`fallback` when absent).
std::string one_of(const nlohmann::json& body, const char* key, const char* fallback,
                   std::initializer_list<const char*> allowed, const char* expected) {
  auto it = body.find(key);
  if (it == body.end()) return fallback;
  if (it->is_string())
    for (const char* a : allowed)
      if (it->get<std::string>() == a) return a;
  throw embedding_error(key, expected);
}

bool is_token_list(const nlohmann::json& j) {
  return j.is_array() && !j.empty() &&
         std::all_of(j.begin(), j.end(), [](const auto& t) { return t.is_number_integer(); });
}

// llama-server's embd_normalize: -1 none, 0 the largest magnitude to 32760, 1 taxicab,
// 2 euclidean (the default, as OpenAI's vectors), p > 2 the p-norm.
void normalize_embedding(std::vector<float>& v, int64_t p) {
  double norm = 0;
  if (p < 0) return;
  if (p == 0) {
    for (float x : v) norm = std::max(norm, std::fabs(double(x)));
    norm /= 32760.0;
  } else {
    for (float x : v) norm += std::pow(std::fabs(double(x)), double(p));
    norm = std::pow(norm, 1.0 / double(p));
  }
  if (norm > 0)
    for (float& x : v) x = static_cast<float>(x / norm);
}

}  // namespace

void HttpApi::embeddings(const httplib::Request& req, httplib::Response& res) {
  const nlohmann::json body = parse_json_object(req.body);
  for (auto it = body.begin(); it != body.end(); ++it) {
    static const char* const known[] = {"input",   "model",          "encoding_format",
                                        "pooling", "embd_normalize", "user"};
    if (std::none_of(std::begin(known), std::end(known),
                     [&](const char* k) { return it.key() == k; }))
      throw HttpError(400,
                      fmt::format("'{}' is not supported by this server (docs/server.md lists "
                                  "the fields /v1/embeddings reads)",
                                  it.key()),
                      "invalid_request_error", "unsupported_field", it.key());
  }
  for (const char* key : {"model", "user"})
    if (body.contains(key) && !body[key].is_string())
      throw embedding_error(key, "must be a string");
  const std::string format = one_of(body, "encoding_format", "float", {"float", "base64"},
                                    "must be \"float\" or \"base64\"");
  const std::string pooling =
      one_of(body, "pooling", "mean", {"mean", "last"}, "must be \"mean\" or \"last\"");
  int64_t norm = 2;
  if (body.contains("embd_normalize")) {
    const nlohmann::json& n = body["embd_normalize"];
    if (!n.is_number_integer() || n.get<int64_t>() < -1 || n.get<int64_t>() > 16)
      throw embedding_error("embd_normalize",
                            "must be -1 (none), 0 (max), 1 (taxicab), 2 (euclidean) or a p-norm "
                            "up to 16");
    norm = n.get<int64_t>();
  }

  // input: a string, a list of strings, a list of token ids, or a list of such lists.
  auto it = body.find("input");
  if (it == body.end())
    throw embedding_error("input", "is required (a string, strings, token ids or lists of them)");
  std::vector<nlohmann::json> items;
  if (it->is_string() || is_token_list(*it))
    items.push_back(*it);
  else if (it->is_array() && !it->empty())
    items.assign(it->begin(), it->end());
  else
    throw embedding_error("input",
                          "must be a string, a list of strings, a list of token ids or "
                          "a list of such lists, not empty");
  if (items.size() > kMaxInputs)
    throw embedding_error("input",
                          fmt::format("holds {} inputs, more than {}", items.size(), kMaxInputs));
  std::vector<std::vector<int32_t>> inputs;
  for (size_t i = 0; i < items.size(); ++i) {
    const std::string field = items.size() == 1 && (it->is_string() || is_token_list(*it))
                                  ? "input"
                                  : fmt::format("input[{}]", i);
    std::vector<int32_t> ids;
    if (items[i].is_string()) {
      const std::string text = items[i].get<std::string>();
      if (text.empty()) throw embedding_error(field, "is empty: give some text");
      check_text_size(text, field);
      try {
        check_encodable(tokenizer_, text, field);
      } catch (const Error& e) {
        throw embedding_error(field, e.what());
      }
      ids = tokenizer_.encode(text);
      // As a completion's prompt: the BOS the tokenizer puts first.
      if (tokenizer_.adds_bos()) ids.insert(ids.begin(), tokenizer_.bos_id());
    } else if (is_token_list(items[i])) {
      for (const auto& t : items[i]) {
        if (t.get<int64_t>() < 0 || t.get<int64_t>() >= tokenizer_.vocab_size())
          throw embedding_error(
              field, fmt::format("must hold token ids in [0, {})", tokenizer_.vocab_size()));
        ids.push_back(static_cast<int32_t>(t.get<int64_t>()));
      }
    } else {
      throw embedding_error(field, "must be a string or a non-empty list of token ids");
    }
    if (ids.empty()) throw embedding_error(field, "is empty: give some text");
    if (static_cast<int64_t>(ids.size()) > options_.max_prompt_tokens)
      throw HttpError(400,
                      fmt::format("'{}' has {} tokens, more than the server's --max-prompt-tokens "
                                  "{}",
                                  field, ids.size(), options_.max_prompt_tokens),
                      "invalid_request_error", "context_length_exceeded", field);
    inputs.push_back(std::move(ids));
  }

  const int64_t d = model_.config().embed_dim;
  std::vector<std::vector<float>> pooled(inputs.size(), std::vector<float>(d, 0.0f));
  int64_t tokens = 0;
  // One input at a time (lengths differ), between the scheduler's passes: the model's threads
  // are its own meanwhile.
  scheduler_.run_between_passes([&] {
    ForwardOptions o;
    o.form = model_.config().prefill_form();
    Arena arena;
    std::vector<float> features;
    for (size_t i = 0; i < inputs.size(); ++i) {
      const auto T = static_cast<int64_t>(inputs[i].size());
      features.assign(static_cast<size_t>(T * d), 0.0f);
      forward_features(model_, inputs[i].data(), 1, T, features.data(), o, arena);
      std::vector<float>& out = pooled[i];
      if (pooling == "last") {
        std::memcpy(out.data(), features.data() + (T - 1) * d, d * sizeof(float));
      } else {
        std::vector<double> sum(static_cast<size_t>(d), 0.0);
        for (int64_t t = 0; t < T; ++t)
          for (int64_t k = 0; k < d; ++k) sum[k] += features[t * d + k];
        for (int64_t k = 0; k < d; ++k) out[k] = static_cast<float>(sum[k] / double(T));
      }
      normalize_embedding(out, norm);
      tokens += T;
    }
  });

  nlohmann::json data = nlohmann::json::array();
  for (size_t i = 0; i < pooled.size(); ++i) {
    nlohmann::json e = {{"object", "embedding"}, {"index", i}};
    if (format == "base64")  // little-endian float32, as OpenAI's
      e["embedding"] = base64_encode(std::string_view(
          reinterpret_cast<const char*>(pooled[i].data()), pooled[i].size() * sizeof(float)));
    else
      e["embedding"] = pooled[i];
    data.push_back(std::move(e));
  }
  res.set_content(
      json_text(nlohmann::json({{"object", "list"},
                                {"data", data},
                                {"model", model_id_},
                                {"usage", {{"prompt_tokens", tokens}, {"total_tokens", tokens}}}})),
      "application/json");
}

}  // namespace retnet::server
