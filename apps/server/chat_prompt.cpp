#include "chat_prompt.h"

namespace retnet::server {

ChatFormatter::ChatFormatter(const ChatTemplateSource& source)
    : source_(source), template_(ChatTemplate::parse(source.source, source.origin)) {
  // The default template ends a turn with "<|end|>", which the models trained here write as text;
  // an imported model ends its turn with its EOS token (its id stops generation too; the text
  // form covers templates that spell it out).
  if (source.source == default_chat_template())
    stop_ = {"<|end|>"};
  else if (!source.eos_token.empty())
    stop_ = {source.eos_token};
}

ChatPrompt ChatFormatter::render(const std::vector<ChatMessage>& messages,
                                 const nlohmann::ordered_json& tools) const {
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  for (const auto& m : messages) {
    nlohmann::ordered_json msg = {{"role", m.role}, {"content", m.content}};
    if (!m.tool_calls.is_null()) {
      msg["tool_calls"] = m.tool_calls;
      // The default template shows content only: there, the calls as the model wrote them.
      if (m.content.empty() && source_.source == default_chat_template()) {
        std::string text;
        for (const auto& call : m.tool_calls)
          text += (text.empty() ? "" : "\n") +
                  nlohmann::ordered_json({{"name", call["function"]["name"]},
                                          {"arguments", call["function"]["arguments"]}})
                      .dump();
        msg["content"] = text;
      }
    }
    if (!m.tool_call_id.empty()) msg["tool_call_id"] = m.tool_call_id;
    list.push_back(std::move(msg));
  }
  ChatPrompt out;
  nlohmann::ordered_json extra = nlohmann::ordered_json::object();
  if (!tools.is_null()) extra["tools"] = tools;
  out.text = apply_chat_template(template_, list, /*add_generation_prompt=*/true, source_.bos_token,
                                 source_.eos_token, extra);
  out.stop = stop_;
  return out;
}

}  // namespace retnet::server
