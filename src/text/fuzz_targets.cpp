// Raw-bytes entry points of the text parsers (fuzz_targets.h): the same calls the CLI makes.
#include "retnet/text/fuzz_targets.h"

#include "retnet/core/error.h"
#include "retnet/core/json_parse.h"
#include "retnet/model/hf_directory.h"
#include "retnet/text/chat_template.h"
#include "retnet/text/tokenizer.h"

namespace retnet {

std::string fuzz_chat_template(std::string_view template_bytes, std::string_view messages_json) {
  const ChatTemplate chat = ChatTemplate::parse(std::string(template_bytes), "fuzz.jinja");
  const nlohmann::ordered_json input = parse_ordered_json(messages_json, "fuzz messages");
  nlohmann::ordered_json messages = input, extra = nlohmann::ordered_json::object();
  if (input.is_object()) {
    RETNET_CHECK(input.contains("messages"), "fuzz messages: an object needs \"messages\"");
    messages = input["messages"];
    for (const auto& [k, v] : input.items())
      if (k != "messages") extra[k] = v;
  }
  return apply_chat_template(chat, messages, true, "<s>", "</s>", extra);
}

std::string fuzz_hf_tokenizer(std::string_view tokenizer_json, std::string_view text) {
  const auto tokenizer = make_hf_tokenizer(std::string(tokenizer_json), "fuzz tokenizer.json");
  check_encodable(*tokenizer, text, "the fuzz text");
  const std::vector<int32_t> ids = tokenizer->encode(text);
  for (const int32_t id : ids) tokenizer->token_bytes(id);
  return tokenizer->decode(ids);
}

void fuzz_hf_config(std::string_view config_json) {
  parse_hf_config(std::string(config_json), "fuzz config.json");
}

}  // namespace retnet
