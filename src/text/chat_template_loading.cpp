// Where a model's chat template comes from: a file given by the user, its directory's
// tokenizer_config.json (or chat_template.jinja), or the default template for models trained here.
#include <filesystem>
#include <nlohmann/json.hpp>

#include "retnet/core/error.h"
#include "retnet/core/json_parse.h"
#include "retnet/core/read_file.h"
#include "retnet/text/chat_template.h"

namespace retnet {
namespace {

// Every turn as "<|role|>\ncontent<|end|>\n"; the tokenizer adds BOS when it is configured to.
const char* const kDefaultTemplate =
    "{% for message in messages %}"
    "{{ '<|' ~ message['role'] ~ '|>\\n' ~ message['content'] ~ '<|end|>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% endif %}";

// A special token as tokenizer_config.json writes it: "<s>" or {"content": "<s>", ...}; null: none.
std::string token_text(const nlohmann::json& config, const char* key, const std::string& origin) {
  if (!config.contains(key) || config[key].is_null()) return "";
  const auto& t = config[key];
  if (t.is_string()) return t.get<std::string>();
  RETNET_CHECK(t.is_object() && t.contains("content") && t["content"].is_string(),
               "{}: '{}' must be a string or an object with a string 'content'", origin, key);
  return t["content"].get<std::string>();
}

}  // namespace

const std::string& default_chat_template() {
  static const std::string text = kDefaultTemplate;
  return text;
}

ChatTemplateSource load_chat_template(const std::string& model_dir, const std::string& template_file) {
  namespace fs = std::filesystem;
  ChatTemplateSource out;
  const fs::path dir(model_dir);
  const fs::path config_path = dir / "tokenizer_config.json";
  std::error_code ec;
  nlohmann::json config;
  if (!model_dir.empty() && fs::is_directory(dir, ec) && fs::is_regular_file(config_path, ec)) {
    const std::string origin = config_path.string();
    config = parse_json(read_file(origin, "tokenizer config"), origin);
    RETNET_CHECK(config.is_object(), "{}: expected a JSON object", origin);
    out.bos_token = token_text(config, "bos_token", origin);
    out.eos_token = token_text(config, "eos_token", origin);
  }
  if (!template_file.empty()) {
    out.source = read_file(template_file, "chat template file");
    out.origin = template_file;
    return out;
  }
  if (config.is_object() && config.contains("chat_template") && !config["chat_template"].is_null()) {
    const auto& t = config["chat_template"];
    const std::string origin = config_path.string();
    if (t.is_string()) {
      out.source = t.get<std::string>();
      out.origin = origin;
      return out;
    }
    RETNET_CHECK(t.is_array(), "{}: 'chat_template' must be a string or a list of {{name, template}}", origin);
    std::string names;
    for (const auto& entry : t) {
      RETNET_CHECK(entry.is_object() && entry.contains("name") && entry["name"].is_string() &&
                       entry.contains("template") && entry["template"].is_string(),
                   "{}: every 'chat_template' entry must be {{\"name\": string, \"template\": string}}", origin);
      const std::string name = entry["name"].get<std::string>();
      if (name == "default") {
        out.source = entry["template"].get<std::string>();
        out.origin = origin + " (chat_template 'default')";
        return out;
      }
      names += (names.empty() ? "" : ", ") + name;
    }
    throw Error(fmt::format("{}: 'chat_template' lists no template named 'default' (it has: {})", origin, names));
  }
  const fs::path jinja_path = dir / "chat_template.jinja";
  if (!model_dir.empty() && fs::is_directory(dir, ec) && fs::is_regular_file(jinja_path, ec)) {
    out.source = read_file(jinja_path.string(), "chat template file");
    out.origin = jinja_path.string();
    return out;
  }
  out.source = default_chat_template();
  out.origin = "the default chat template";
  return out;
}

}  // namespace retnet
