// The public face of the template engine: parse once (lexer, parser), render per request
// (evaluator), and transformers' apply_chat_template variables.
#include "retnet/text/chat_template.h"

#include "ast.h"
#include "evaluator.h"
#include "lexer.h"
#include "parser.h"
#include "retnet/core/error.h"
#include "retnet/text/utf8.h"

namespace retnet {
namespace {

// JSON given to a template: nested at most as deep as parse_json allows, every string and key
// valid UTF-8 (the prompt is tokenized as text). `path` names the value in messages.
void check_variables(const nlohmann::ordered_json& j, const std::string& origin,
                     const std::string& path, int depth) {
  RETNET_CHECK(depth <= 128, "chat template {}: {} is nested deeper than 128 levels", origin, path);
  // Paths are spelled out only for a bad value: a long conversation is checked per render.
  if (j.is_string()) {
    if (!utf8_valid(j.get_ref<const std::string&>()))
      require_utf8(j.get_ref<const std::string&>(),
                   fmt::format("chat template {}: {}", origin, path));
  } else if (j.is_array()) {
    for (size_t i = 0; i < j.size(); ++i)
      if (j[i].is_structured() ||
          (j[i].is_string() && !utf8_valid(j[i].get_ref<const std::string&>())))
        check_variables(j[i], origin, fmt::format("{}[{}]", path, i), depth + 1);
  } else if (j.is_object()) {
    for (const auto& [k, v] : j.items()) {
      if (!utf8_valid(k))
        require_utf8(k, fmt::format("chat template {}: a key of {}", origin, path));
      if (v.is_structured() || (v.is_string() && !utf8_valid(v.get_ref<const std::string&>())))
        check_variables(v, origin, path + "." + k, depth + 1);
    }
  }
}

// transformers' message shape: an object with a string role, and content that is text, a list
// of parts ({"type": "text", "text": ...}) or null.
void check_messages(const nlohmann::ordered_json& messages, const std::string& origin,
                    int64_t max_items) {
  RETNET_CHECK(static_cast<int64_t>(messages.size()) <= max_items,
               "chat template {}: {} messages, over the limit of {}", origin, messages.size(),
               max_items);
  for (size_t i = 0; i < messages.size(); ++i) {
    const auto& m = messages[i];
    RETNET_CHECK(m.is_object(),
                 "chat template {}: messages[{}] must be an object with \"role\" and "
                 "\"content\", got {}",
                 origin, i, m.type_name());
    auto role = m.find("role");
    RETNET_CHECK(role != m.end() && role->is_string(),
                 "chat template {}: messages[{}].role must be a string, got {}", origin, i,
                 role == m.end() ? "nothing" : role->type_name());
    auto content = m.find("content");
    RETNET_CHECK(
        content == m.end() || content->is_string() || content->is_array() || content->is_null(),
        "chat template {}: messages[{}].content must be a string, a list of parts or null, got {}",
        origin, i, content->type_name());
    if (content != m.end() && content->is_array())
      for (size_t k = 0; k < content->size(); ++k)
        RETNET_CHECK((*content)[k].is_object(),
                     "chat template {}: messages[{}].content[{}] must be an object "
                     "(a part such as {{\"type\": \"text\", \"text\": ...}}), got {}",
                     origin, i, k, (*content)[k].type_name());
  }
  check_variables(messages, origin, "messages", 0);
}

}  // namespace

ChatTemplate ChatTemplate::parse(const std::string& source, const std::string& origin,
                                 const ChatTemplateLimits& limits) {
  RETNET_CHECK(limits.max_output_bytes > 0 && limits.max_steps > 0 && limits.max_depth > 0 &&
                   limits.max_nesting > 0,
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
const ChatTemplateLimits& ChatTemplate::limits() const { return program_->limits; }

std::string apply_chat_template(const ChatTemplate& chat_template, const nlohmann::ordered_json& messages,
                                bool add_generation_prompt, const std::string& bos_token,
                                const std::string& eos_token, const nlohmann::ordered_json& extra) {
  RETNET_CHECK(messages.is_array(), "chat template {}: messages must be a JSON array, got {}",
               chat_template.origin(), messages.type_name());
  RETNET_CHECK(extra.is_object() || extra.is_null(), "chat template {}: extra variables must be a JSON object, got {}",
               chat_template.origin(), extra.type_name());
  // Items of a list a render may build: the same bound the renderer applies.
  check_messages(messages, chat_template.origin(),
                 std::max<int64_t>(1, chat_template.limits().max_output_bytes / 16));
  if (extra.is_object()) check_variables(extra, chat_template.origin(), "the variables", 0);
  require_utf8(bos_token, fmt::format("chat template {}: bos_token", chat_template.origin()));
  require_utf8(eos_token, fmt::format("chat template {}: eos_token", chat_template.origin()));
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
