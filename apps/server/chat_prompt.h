#pragma once
// Chat messages -> the prompt text a model reads, through a Jinja chat template
// (retnet/text/chat_template.h): the model directory's (tokenizer_config.json), a file given with
// --chat-template, or the default template of the models trained here:
//
//   <|system|>\nBe brief.<|end|>\n<|user|>\nHi!<|end|>\n<|assistant|>\n
//
// The template is parsed once, when the server starts, so a broken one stops it there.
#include <string>
#include <utility>
#include <vector>

#include "retnet/text/chat_template.h"

namespace retnet::server {

struct ChatMessage {
  ChatMessage() = default;
  ChatMessage(std::string role, std::string content)
      : role(std::move(role)), content(std::move(content)) {}
  std::string role;  // "system", "user", "assistant", ... as the client sent it
  std::string content;
  // An assistant's calls as Hugging Face templates read them ([{"id", "type", "function":
  // {"name", "arguments": {...}}}]); null: none.
  nlohmann::ordered_json tool_calls = nullptr;
  std::string tool_call_id;  // a tool result's call
};

struct ChatPrompt {
  std::string text;
  std::vector<std::string> stop;  // stop strings the template implies
};

class ChatFormatter {
 public:
  explicit ChatFormatter(const ChatTemplateSource& source);
  // The conversation with the assistant's turn opened; an Error (a template's raise_exception,
  // say) names the template.
  // `tools` (when not null) is the template's `tools` variable, as transformers passes it.
  ChatPrompt render(const std::vector<ChatMessage>& messages,
                    const nlohmann::ordered_json& tools = nullptr) const;
  const std::string& origin() const { return source_.origin; }

 private:
  ChatTemplateSource source_;
  ChatTemplate template_;
  std::vector<std::string> stop_;
};

}  // namespace retnet::server
