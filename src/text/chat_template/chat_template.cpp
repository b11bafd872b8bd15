// The public face of the template engine: parse once (lexer, parser), render per request
// (evaluator), and transformers' apply_chat_template variables.
#include "retnet/text/chat_template.h"

#include "ast.h"
#include "evaluator.h"
#include "lexer.h"
#include "parser.h"
#include "retnet/core/error.h"

namespace retnet {

ChatTemplate ChatTemplate::parse(const std::string& source, const std::string& origin,
                                 const ChatTemplateLimits& limits) {
  RETNET_CHECK(limits.max_output_bytes > 0 && limits.max_steps > 0 && limits.max_depth > 0,
               "chat template {}: limits must be positive", origin);
  RETNET_CHECK(static_cast<int64_t>(source.size()) <= limits.max_output_bytes,
               "chat template {}: the template is {} bytes, over the limit of {}", origin, source.size(),
               limits.max_output_bytes);
  auto program = std::make_shared<chat_template_detail::Program>();
  program->source = source;
  program->origin = origin;
  program->limits = limits;
  program->body = chat_template_detail::parse_tokens(chat_template_detail::tokenize(source, origin), origin);
  ChatTemplate t;
  t.program_ = std::move(program);
  return t;
}

std::string ChatTemplate::render(const nlohmann::ordered_json& context) const {
  RETNET_CHECK(program_, "render() on a chat template that was never parsed");
  chat_template_detail::Evaluator evaluator(*program_);
  return evaluator.render(context);
}

const std::string& ChatTemplate::origin() const { return program_->origin; }
const std::string& ChatTemplate::source() const { return program_->source; }

std::string apply_chat_template(const ChatTemplate& chat_template, const nlohmann::ordered_json& messages,
                                bool add_generation_prompt, const std::string& bos_token,
                                const std::string& eos_token, const nlohmann::ordered_json& extra) {
  RETNET_CHECK(messages.is_array(), "chat template {}: messages must be a JSON array, got {}",
               chat_template.origin(), messages.type_name());
  RETNET_CHECK(extra.is_object() || extra.is_null(), "chat template {}: extra variables must be a JSON object, got {}",
               chat_template.origin(), extra.type_name());
  nlohmann::ordered_json context = nlohmann::ordered_json::object();
  if (extra.is_object())
    for (const auto& [k, v] : extra.items()) context[k] = v;
  context["messages"] = messages;
  context["add_generation_prompt"] = add_generation_prompt;
  context["bos_token"] = bos_token;
  context["eos_token"] = eos_token;
  return chat_template.render(context);
}

}  // namespace retnet
