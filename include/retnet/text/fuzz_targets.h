#pragma once
// One plain function per text parser, taking raw bytes, for fuzzers and hostile-input tests. Each
// runs the parser the way the engine does and throws retnet::Error for input it refuses; anything
// else it does (another exception, a crash, a hang, a huge allocation) is a bug.
#include <cstddef>
#include <string>
#include <string_view>

namespace retnet {

// Parses `template_bytes` as a chat template and renders it with `messages_json` (what
// `retnet chat-template --messages` reads: a list of messages, or an object with "messages" and
// other variables). Returns the prompt.
std::string fuzz_chat_template(std::string_view template_bytes, std::string_view messages_json);

// Loads `tokenizer_json` as a tokenizer.json, encodes `text` (when the tokenizer can read it),
// decodes the ids and each token's bytes. Returns the decoded text.
std::string fuzz_hf_tokenizer(std::string_view tokenizer_json, std::string_view text);

// Reads `config_json` as a model directory's config.json (architecture and special token ids).
void fuzz_hf_config(std::string_view config_json);

}  // namespace retnet
