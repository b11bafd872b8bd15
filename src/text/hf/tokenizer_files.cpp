// The tokenizer files of an exported Hugging Face directory: tokenizer.json (or tokenizer.model)
// and tokenizer_config.json, so that transformers and @huggingface/tokenizers tokenize as the
// engine does.
#include <nlohmann/json.hpp>

#include "components.h"
#include "retnet/text/tokenizer.h"

namespace retnet {

const std::string& byte_level_tokenizer_json() {
  // GPT-2's byte-level alphabet with byte b as id b and no merges: every byte is its own token.
  // The whole text is one word (use_regex false), so no split can differ from the engine's.
  static const std::string text = [] {
    nlohmann::ordered_json vocab = nlohmann::ordered_json::object();
    for (int b = 0; b < 256; ++b) vocab[hf::byte_to_unicode(static_cast<unsigned char>(b))] = b;
    nlohmann::ordered_json j;
    j["version"] = "1.0";
    j["truncation"] = nullptr;
    j["padding"] = nullptr;
    j["added_tokens"] = nlohmann::ordered_json::array();
    j["normalizer"] = nullptr;
    j["pre_tokenizer"] = {{"type", "ByteLevel"},
                          {"add_prefix_space", false},
                          {"trim_offsets", true},
                          {"use_regex", false}};
    j["post_processor"] = nullptr;
    j["decoder"] = {{"type", "ByteLevel"},
                    {"add_prefix_space", false},
                    {"trim_offsets", true},
                    {"use_regex", false}};
    j["model"] = {{"type", "BPE"},
                  {"dropout", nullptr},
                  {"unk_token", nullptr},
                  {"continuing_subword_prefix", nullptr},
                  {"end_of_word_suffix", nullptr},
                  {"fuse_unk", false},
                  {"byte_fallback", false},
                  {"ignore_merges", false},
                  {"vocab", vocab},
                  {"merges", nlohmann::ordered_json::array()}};
    return j.dump(2) + "\n";
  }();
  return text;
}

std::map<std::string, std::string> hf_tokenizer_files(const Tokenizer& tokenizer,
                                                      const std::string& chat_template) {
  std::map<std::string, std::string> files;
  nlohmann::ordered_json config = nlohmann::ordered_json::object();
  const std::string kind = tokenizer.kind();
  if (kind == "sentencepiece") {
    files["tokenizer.model"] = tokenizer.serialize();
  } else {
    files["tokenizer.json"] = kind == "hf" ? tokenizer.serialize() : byte_level_tokenizer_json();
    config["tokenizer_class"] = "PreTrainedTokenizerFast";
  }
  // transformers would otherwise strip spaces before punctuation when decoding.
  config["clean_up_tokenization_spaces"] = false;
  if (tokenizer.bos_id() >= 0) config["bos_token"] = tokenizer.token_bytes(tokenizer.bos_id());
  if (tokenizer.eos_id() >= 0) config["eos_token"] = tokenizer.token_bytes(tokenizer.eos_id());
  if (kind == "hf") config["add_bos_token"] = tokenizer.adds_bos();
  if (!chat_template.empty()) config["chat_template"] = chat_template;
  files["tokenizer_config.json"] = config.dump(2) + "\n";
  return files;
}

}  // namespace retnet
