#pragma once
// A tokenizer.json parsed into the parts this engine runs. Anything it does not run (another
// model type, normalizer, pre-tokenizer, decoder or post-processor) is an Error naming the file
// and the key, never silently different tokens.
#include <memory>
#include <string>
#include <vector>

#include "bpe.h"
#include "components.h"

namespace retnet::hf {

struct AddedToken {
  std::string content;
  int32_t id = -1;
  bool special = false, lstrip = false, rstrip = false, normalized = false;
};

struct Config {
  std::vector<NormalizerStep> normalizer;
  std::vector<PreTokenizerStep> pre_tokenizer;
  std::vector<DecoderStep> decoder;
  std::unique_ptr<Bpe> bpe;
  std::vector<AddedToken> added;
  std::vector<std::string> id_to_token;  // model vocabulary and added tokens; "" for holes
  int32_t bos_id = -1, eos_id = -1;
  bool adds_bos = false;
};

Config parse_config(const std::string& json_text, const std::string& origin);

}  // namespace retnet::hf
