#include "chat_prompt.h"

namespace retnet::server {

ChatPrompt render_chat_prompt(const std::vector<ChatMessage>& messages) {
  ChatPrompt out;
  std::string system;
  for (const auto& m : messages)
    if (m.role == "system" || m.role == "developer") {
      if (!system.empty()) system += "\n\n";
      system += m.content;
    }
  if (!system.empty()) out.text = system + "\n\n";
  for (const auto& m : messages) {
    if (m.role == "system" || m.role == "developer") continue;
    std::string name = m.role;
    if (name == "user") name = "User";
    if (name == "assistant") name = "Assistant";
    out.text += name + ": " + m.content + "\n";
  }
  out.text += "Assistant:";
  out.stop = {"\nUser:"};
  return out;
}

}  // namespace retnet::server
