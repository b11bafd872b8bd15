#pragma once
// Chat messages -> the prompt text a model reads. The default template suits the models trained
// here (plain text, no special tokens):
//
//   <system message>\n\n            (when there is one; several are joined with blank lines)
//   User: <content>\n
//   Assistant: <content>\n
//   ...
//   Assistant:
//
// and generation stops before the next "\nUser:" (the model starting the user's next turn).
// Imported models bring their own Jinja template; this is where it will plug in.
#include <string>
#include <vector>

namespace retnet::server {

struct ChatMessage {
  std::string role;  // "system", "user" or "assistant" (others are written with their name)
  std::string content;
};

struct ChatPrompt {
  std::string text;
  std::vector<std::string> stop;  // stop strings the template implies
};

ChatPrompt render_chat_prompt(const std::vector<ChatMessage>& messages);

}  // namespace retnet::server
