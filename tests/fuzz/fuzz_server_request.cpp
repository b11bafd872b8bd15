// The server's request bodies: JSON, then the completion or chat fields (first byte even: chat),
// and a chat's messages rendered through the default template, as a request to
// /v1/chat/completions or /v1/completions is handled before it reaches the scheduler.
#include "chat_prompt.h"
#include "fuzz_common.h"
#include "openai_request.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace retnet;
  if (size == 0) return 0;
  static const server::ChatFormatter chat(
      ChatTemplateSource{default_chat_template(), "the default template", "", "<|end|>"});
  server::RequestLimits limits;
  limits.max_tokens = 256;
  limits.vocab = 256;
  limits.max_n = 8;
  limits.slots = 4;
  const bool is_chat = (data[0] & 1) == 0;
  try {
    const auto body = server::parse_json_object(std::string(fuzz::as_text(data + 1, size - 1)));
    const server::CompletionRequest r = server::parse_completion_request(body, is_chat, limits);
    if (is_chat) chat.render(r.messages);
  } catch (const server::HttpError&) {
  } catch (const Error&) {
  }
  return 0;
}
