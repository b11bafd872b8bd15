// `retnet chat-template`: renders a conversation with a model's chat template (or a template
// file, or the default one) and prints the prompt exactly as the engine would tokenize it.
#include <chrono>
#include <cstdio>
#include <memory>

#include "commands.h"
#include "retnet/core/json_parse.h"
#include "retnet/core/read_file.h"
#include "retnet/retnet.h"

namespace retnet::cli {
namespace {

struct ChatTemplateOptions {
  std::string model, template_file, messages, bos, eos;
  bool add_generation_prompt = false, bos_given = false, eos_given = false;
  int64_t time_renders = 0;
};

void run_chat_template(const ChatTemplateOptions& o) {
  ChatTemplateSource src = load_chat_template(o.model, o.template_file);
  if (o.bos_given) src.bos_token = o.bos;
  if (o.eos_given) src.eos_token = o.eos;
  const nlohmann::ordered_json input = parse_ordered_json(
      read_file(o.messages, "messages file"), fmt::format("messages file '{}'", o.messages));
  // A list of messages, or an object with "messages" and other variables (tools, documents...).
  nlohmann::ordered_json messages, extra = nlohmann::ordered_json::object();
  if (input.is_array()) {
    messages = std::move(input);
  } else {
    RETNET_CHECK(input.is_object() && input.contains("messages"),
                 "messages file '{}': expected a JSON list of messages or an object with \"messages\"", o.messages);
    for (auto& [k, v] : input.items())
      if (k != "messages") extra[k] = v;
    messages = input["messages"];
  }
  const ChatTemplate chat = ChatTemplate::parse(src.source, src.origin);
  const std::string prompt =
      apply_chat_template(chat, messages, o.add_generation_prompt, src.bos_token, src.eos_token, extra);
  std::fwrite(prompt.data(), 1, prompt.size(), stdout);
  std::fflush(stdout);
  if (o.time_renders > 0) {
    const auto t0 = std::chrono::steady_clock::now();
    size_t bytes = 0;
    for (int64_t i = 0; i < o.time_renders; ++i)
      bytes += apply_chat_template(chat, messages, o.add_generation_prompt, src.bos_token, src.eos_token, extra).size();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::fprintf(stderr, "rendered %lld times in %.3f s: %.0f renders/s, %.1f MB/s of prompt (%zu bytes each)\n",
                 static_cast<long long>(o.time_renders), s, static_cast<double>(o.time_renders) / s,
                 static_cast<double>(bytes) / s / 1e6, prompt.size());
  }
}

}  // namespace

void register_chat_template(CLI::App& app) {
  auto o = std::make_shared<ChatTemplateOptions>();
  auto* cmd = app.add_subcommand(
      "chat-template",
      "Render a conversation with a chat template and print the prompt: the model directory's "
      "(tokenizer_config.json), a template file, or the default template");
  cmd->add_option("--model,-m", o->model,
                  "Model directory whose tokenizer_config.json holds the chat template and special tokens");
  cmd->add_option("--template,--chat-template", o->template_file, "Chat template file (Jinja), overriding the model's");
  cmd->add_option("--messages", o->messages,
                  "JSON file: a list of {role, content} messages, or an object with \"messages\" and "
                  "other template variables (tools, documents, ...)")
      ->required();
  cmd->add_flag("--add-generation-prompt", o->add_generation_prompt, "End with the assistant's turn header");
  cmd->add_option("--bos-token", o->bos, "bos_token (default: the directory's tokenizer_config.json)")
      ->each([o](const std::string&) { o->bos_given = true; });
  cmd->add_option("--eos-token", o->eos, "eos_token (default: the directory's tokenizer_config.json)")
      ->each([o](const std::string&) { o->eos_given = true; });
  cmd->add_option("--time-renders", o->time_renders, "Also render N more times and report the rate on stderr")
      ->check(integer_within(0, 100'000'000));
  cmd->callback([o] { run_chat_template(*o); });
}

}  // namespace retnet::cli
