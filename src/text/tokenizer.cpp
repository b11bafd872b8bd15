#include "retnet/text/tokenizer.h"

#include <filesystem>
#include <nlohmann/json.hpp>

#include "retnet/core/base64.h"
#include "retnet/core/error.h"
#include "retnet/core/hash.h"
#include "retnet/core/json_parse.h"
#include "retnet/core/read_file.h"
#include "retnet/core/safetensors.h"
#include "retnet/text/utf8.h"

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

constexpr const char* kKindKey = "tokenizer";
constexpr const char* kModelKey = "tokenizer_model";

std::string read_whole_file(const std::string& path, const char* what) {
  std::error_code ec;
  RETNET_CHECK(std::filesystem::is_regular_file(path, ec),
               "{} '{}' does not exist or is not a file", what, path);
  return read_file(path, what);
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// A tokenizer.json file's tokenizer: byte-level for the file an export writes for byte-level
// models, so that a model read back from its export tokenizes as before (any bytes).
std::unique_ptr<Tokenizer> tokenizer_from_json_file(const std::string& path) {
  std::string text = read_whole_file(path, "tokenizer file");
  if (text == byte_level_tokenizer_json()) return make_byte_tokenizer();
  return make_hf_tokenizer(text, path);
}

}  // namespace

std::string Tokenizer::decode(const std::vector<int32_t>& ids) const {
  std::string text;
  for (int32_t id : ids) text += token_bytes(id);
  return text;
}

void check_encodable(const Tokenizer& tokenizer, std::string_view text, const std::string& what) {
  if (tokenizer.reads_utf8_only()) require_utf8(text, what);
}

std::unique_ptr<Tokenizer> make_byte_tokenizer() { return std::make_unique<ByteTokenizer>(); }

std::unique_ptr<Tokenizer> tokenizer_from_serialized(const std::string& kind,
                                                     const std::string& bytes) {
  if (kind == "bytes") return make_byte_tokenizer();
  if (kind == "sentencepiece") return make_sentencepiece_tokenizer(bytes, "serialized tokenizer");
  if (kind == "hf") return make_hf_tokenizer(bytes, "serialized tokenizer.json");
  throw Error(fmt::format(
      "unknown tokenizer kind '{}' (this engine knows: bytes, sentencepiece, hf)", kind));
}

std::unique_ptr<Tokenizer> load_tokenizer(const std::string& spec) {
  if (spec == "bytes") return make_byte_tokenizer();
  if (ends_with(spec, ".safetensors")) return load_model_tokenizer(spec);
  std::error_code ec;
  if (std::filesystem::is_directory(spec, ec)) {
    // A model directory (config.json beside the tokenizer files), or a tokenizer's own directory.
    if (std::filesystem::exists(std::filesystem::path(spec) / "config.json", ec))
      return load_model_tokenizer(spec);
    const std::string json = (std::filesystem::path(spec) / "tokenizer.json").string();
    RETNET_CHECK(std::filesystem::is_regular_file(json, ec),
                 "tokenizer directory '{}' has no tokenizer.json", spec);
    return tokenizer_from_json_file(json);
  }
  if (ends_with(spec, ".json")) return tokenizer_from_json_file(spec);
  return make_sentencepiece_tokenizer(read_whole_file(spec, "tokenizer file"), spec);
}

std::map<std::string, std::string> tokenizer_metadata(const Tokenizer& tokenizer) {
  std::map<std::string, std::string> meta{{kKindKey, tokenizer.kind()}};
  const std::string bytes = tokenizer.serialize();
  if (!bytes.empty()) meta[kModelKey] = base64_encode(bytes);
  return meta;
}

std::unique_ptr<Tokenizer> tokenizer_from_metadata(const std::map<std::string, std::string>& meta,
                                                   const std::string& origin) {
  auto kind = meta.find(kKindKey);
  if (kind == meta.end()) return make_byte_tokenizer();
  auto model = meta.find(kModelKey);
  const std::string bytes =
      model == meta.end() ? ""
                          : base64_decode(model->second, origin + ": metadata tokenizer_model");
  try {
    return tokenizer_from_serialized(kind->second, bytes);
  } catch (const Error& e) {
    throw Error(
        fmt::format("'{}': the tokenizer in its metadata does not load: {}", origin, e.what()));
  }
}

std::unique_ptr<Tokenizer> load_model_tokenizer(const std::string& model_path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_directory(model_path, ec)) {  // a Hugging Face model directory
    const fs::path json = fs::path(model_path) / "tokenizer.json";
    if (fs::exists(json, ec)) return tokenizer_from_json_file(json.string());
    const fs::path spm = fs::path(model_path) / "tokenizer.model";
    if (fs::exists(spm, ec))
      return make_sentencepiece_tokenizer(read_whole_file(spm.string(), "tokenizer file"),
                                          spm.string());
    // No tokenizer file: a byte-level model (vocabulary 256) needs none.
    const fs::path config = fs::path(model_path) / "config.json";
    if (fs::exists(config, ec)) {
      const auto j = parse_json(read_whole_file(config.string(), "model config"), config.string());
      if (j.is_object() && j.contains("vocab_size") && j["vocab_size"] == 256)
        return make_byte_tokenizer();
    }
    throw Error(fmt::format("'{}' has no tokenizer.json or tokenizer.model, and its "
                            "vocabulary is not the 256 bytes; give one with --tokenizer",
                            model_path));
  }
  SafetensorsFile file = SafetensorsFile::open(model_path);
  return tokenizer_from_metadata(file.metadata(), model_path);
}

uint64_t tokenizer_fingerprint(const Tokenizer& tokenizer) {
  const std::string kind = tokenizer.kind(), bytes = tokenizer.serialize();
  return fnv1a(bytes.data(), bytes.size(), fnv1a(kind.c_str(), kind.size() + 1));
}

}  // namespace retnet
