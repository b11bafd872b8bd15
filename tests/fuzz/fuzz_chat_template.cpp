// Chat templates (tokenizer_config.json's chat_template, `--chat-template FILE`): parse, then
// render a conversation with tools, as the server and `retnet chat-template` do. Rendering is
// bounded in steps, output and depth, so every input must end quickly in text or an Error.
#include <nlohmann/json.hpp>

#include "fuzz_common.h"
#include "retnet/text/chat_template.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace retnet;
  static const nlohmann::ordered_json messages = nlohmann::ordered_json::parse(R"([
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Hi! caf\u00e9"},
    {"role": "assistant", "content": "Hello.", "tool_calls": [
      {"type": "function", "function": {"name": "f", "arguments": {"x": 1}}}]},
    {"role": "tool", "content": "42"},
    {"role": "user", "content": [{"type": "text", "text": "and?"}]}])");
  static const nlohmann::ordered_json extra = nlohmann::ordered_json::parse(
      R"({"tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}],
          "date_string": "28 Nov 2026"})");
  fuzz::rejecting_errors([&] {
    const ChatTemplate t = ChatTemplate::parse(std::string(fuzz::as_text(data, size)), "fuzz");
    apply_chat_template(t, messages, true, "<s>", "</s>", extra);
  });
  return 0;
}
