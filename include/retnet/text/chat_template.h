#pragma once
// Chat templates: the subset of Jinja that Hugging Face chat templates use (the chat_template of a
// tokenizer_config.json), parsed once and rendered many times. Rendering is sandboxed: no file or
// network access, and bounded work, nesting and output, so a hostile template ends in an Error
// instead of hanging or exhausting memory. Whitespace follows transformers' environment
// (trim_blocks and lstrip_blocks on, a single trailing newline of the source dropped).
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

namespace retnet {

// What one render may spend; exceeding any is an Error naming the template and the limit.
struct ChatTemplateLimits {
  int64_t max_output_bytes = 16 << 20;  // also the largest string or list built on the way
  int64_t max_steps = 10'000'000;       // nodes evaluated, items and 64-byte blocks copied,
                                        // 10 per loop iteration: about a second at most
  int max_depth = 64;                   // nested macro calls
  int max_nesting = 1024;               // statements, expressions and macro calls open at once:
                                        // bounds the renderer's stack
};

namespace chat_template_detail {
struct Program;
}

class ChatTemplate {
 public:
  // Parses `source`; syntax errors are Errors with "origin:line:column". `origin` names the
  // template in every message (a file name, "tokenizer_config.json of DIR", ...).
  static ChatTemplate parse(const std::string& source, const std::string& origin,
                            const ChatTemplateLimits& limits = {});
  // Renders with the given variables (a JSON object; key order is kept, as tojson shows it).
  std::string render(const nlohmann::ordered_json& context) const;
  const std::string& origin() const;
  const std::string& source() const;
  const ChatTemplateLimits& limits() const;

 private:
  std::shared_ptr<const chat_template_detail::Program> program_;
};

// Renders a conversation the way transformers' apply_chat_template does: the variables
// `messages`, `add_generation_prompt`, `bos_token`, `eos_token`, plus every key of `extra` (for
// example `tools`, `documents`, `date_string`). Accepts nlohmann::json too (its keys sorted).
// Each message must be an object with a string "role" and a "content" that is a string, a list
// of part objects or null; every string must be UTF-8; anything else is an Error naming it.
std::string apply_chat_template(const ChatTemplate& chat_template,
                                const nlohmann::ordered_json& messages, bool add_generation_prompt,
                                const std::string& bos_token, const std::string& eos_token,
                                const nlohmann::ordered_json& extra = nlohmann::ordered_json::object());

// A model's chat template and special tokens, as loaded from its directory or a file.
struct ChatTemplateSource {
  std::string source;  // the template text
  std::string origin;  // where it came from, for messages
  std::string bos_token, eos_token;
};

// The template this engine documents for models trained here (docs/chat-templates.md): turns
// as "<|role|>\ncontent<|end|>\n", the generation prompt "<|assistant|>\n".
const std::string& default_chat_template();

// The chat template of a Hugging Face model directory: `template_file` when not empty, else the
// directory's tokenizer_config.json `chat_template` (a string, or a list of {name, template}
// from which "default" is taken), else chat_template.jinja beside it, else the default template.
// bos_token / eos_token come from tokenizer_config.json (a string or an AddedToken object) when
// `model_dir` is a directory that has one; otherwise they are empty.
ChatTemplateSource load_chat_template(const std::string& model_dir,
                                      const std::string& template_file = "");

}  // namespace retnet
