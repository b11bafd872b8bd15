#include "retnet/text/tokenizer.h"

#include "retnet/core/error.h"
#include "retnet/core/safetensors.h"

namespace retnet {
namespace {

class ByteTokenizer final : public Tokenizer {
 public:
  std::string kind() const override { return "bytes"; }
  int64_t vocab_size() const override { return 256; }
  std::vector<int32_t> encode(std::string_view text) const override {
    std::vector<int32_t> ids(text.size());
    for (size_t i = 0; i < text.size(); ++i) ids[i] = static_cast<unsigned char>(text[i]);
    return ids;
  }
  std::string token_bytes(int32_t id) const override {
    RETNET_CHECK(id >= 0 && id < 256, "token id {} is out of range for the byte tokenizer", id);
    return std::string(1, static_cast<char>(id));
  }
  std::string serialize() const override { return ""; }
};

}  // namespace

std::string Tokenizer::decode(const std::vector<int32_t>& ids) const {
  std::string text;
  for (int32_t id : ids) text += token_bytes(id);
  return text;
}

std::unique_ptr<Tokenizer> make_byte_tokenizer() { return std::make_unique<ByteTokenizer>(); }

std::unique_ptr<Tokenizer> tokenizer_from_serialized(const std::string& kind,
                                                     const std::string& bytes) {
  if (kind == "bytes") return make_byte_tokenizer();
  (void)bytes;
  throw Error(fmt::format("unknown tokenizer kind '{}' (this engine knows: bytes)", kind));
}

std::unique_ptr<Tokenizer> load_model_tokenizer(const std::string& model_path) {
  SafetensorsFile file = SafetensorsFile::open(model_path);
  auto it = file.metadata().find("tokenizer");
  if (it == file.metadata().end()) return make_byte_tokenizer();
  return tokenizer_from_serialized(it->second, "");
}

}  // namespace retnet
