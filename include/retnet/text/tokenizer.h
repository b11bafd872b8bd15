#pragma once
// Tokenizers: text <-> token ids. Three kinds: byte-level (vocabulary 256, the default: any text,
// nothing to train), SentencePiece (tokenizer_sentencepiece.cpp) and Hugging Face tokenizer.json
// BPE models (src/text/hf/). A model file records the tokenizer it was trained with, so eval and
// generate tokenize as training did.
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace retnet {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  // "bytes", "sentencepiece" or "hf".
  virtual std::string kind() const = 0;
  virtual int64_t vocab_size() const = 0;
  // Token ids of a text (no BOS/EOS added).
  virtual std::vector<int32_t> encode(std::string_view text) const = 0;
  // The exact bytes one token stands for when it follows other text (a SentencePiece "▁" is a
  // space; a byte-fallback piece is its byte). Concatenating these gives the decoded text, so a
  // generator can stream them; a multi-byte character may span tokens.
  virtual std::string token_bytes(int32_t id) const = 0;
  // The whole text of a token sequence.
  virtual std::string decode(const std::vector<int32_t>& ids) const;
  // End-of-sequence id, or -1 if the vocabulary has none.
  virtual int32_t eos_id() const { return -1; }
  // Beginning-of-sequence id, or -1 if the vocabulary has none.
  virtual int32_t bos_id() const { return -1; }
  // Whether the tokenizer's own pipeline puts bos_id() before a text (a tokenizer.json whose
  // post-processor template starts with it); encode() never adds it.
  virtual bool adds_bos() const { return false; }
  // What a model file stores to rebuild this tokenizer (see tokenizer_from_serialized).
  virtual std::string serialize() const = 0;
  // Whether encode() takes UTF-8 text only (SentencePiece, which would turn other bytes into
  // U+FFFD; its encode throws instead). Byte-level tokenizers take any bytes.
  virtual bool reads_utf8_only() const { return false; }
};

// Throws Error naming `what` (a file, "the prompt") and the offset of the first bad byte when the
// tokenizer reads UTF-8 only and `text` is not UTF-8.
void check_encodable(const Tokenizer& tokenizer, std::string_view text, const std::string& what);

// Byte-level: token i is byte i.
std::unique_ptr<Tokenizer> make_byte_tokenizer();

// SentencePiece from a serialized ModelProto (the bytes of a `.model` file); throws Error naming
// `origin` when the bytes are not a model.
std::unique_ptr<Tokenizer> make_sentencepiece_tokenizer(const std::string& model_proto,
                                                        const std::string& origin);

// A Hugging Face `tokenizer.json` (its text) with a BPE model: SentencePiece-style with byte
// fallback (Llama, Mistral) or byte-level (GPT-2, Llama 3). serialize() gives the JSON text back.
// Throws Error naming `origin` and the key for malformed JSON or any part it does not support.
std::unique_ptr<Tokenizer> make_hf_tokenizer(const std::string& json_text,
                                             const std::string& origin);

// Rebuilds a tokenizer from kind() and serialize(); throws Error on an unknown kind or bad bytes.
std::unique_ptr<Tokenizer> tokenizer_from_serialized(const std::string& kind,
                                                     const std::string& bytes);

// What a user names on the command line: "bytes", a SentencePiece `.model` file, a Hugging Face
// `tokenizer.json` (or a directory holding one), or a model or checkpoint `.safetensors` file
// whose tokenizer is reused.
std::unique_ptr<Tokenizer> load_tokenizer(const std::string& spec);

// A model file's metadata entries for a tokenizer: "tokenizer" (the kind) and, when serialize()
// is not empty, "tokenizer_model" (its bytes in base64, as metadata values are JSON strings).
std::map<std::string, std::string> tokenizer_metadata(const Tokenizer& tokenizer);

// The tokenizer recorded in a file's metadata (see tokenizer_metadata); byte-level when it records
// none (torchscale exports, older files). `origin` names the file in errors.
std::unique_ptr<Tokenizer> tokenizer_from_metadata(const std::map<std::string, std::string>& meta,
                                                   const std::string& origin);

// The tokenizer a model file records in its metadata; byte-level when it records none.
std::unique_ptr<Tokenizer> load_model_tokenizer(const std::string& model_path);

// The tokenizer files of a Hugging Face model directory (name -> bytes): "tokenizer.json" (a
// tokenizer.json tokenizer's own; for byte-level, byte_level_tokenizer_json()) or
// "tokenizer.model" (SentencePiece), and "tokenizer_config.json" naming the BOS and EOS tokens and
// holding `chat_template` when it is not empty.
std::map<std::string, std::string> hf_tokenizer_files(const Tokenizer& tokenizer,
                                                      const std::string& chat_template);

// A tokenizer.json that encodes every byte as its id, as the byte-level tokenizer does (UTF-8
// text; the engine reads this exact text back as the byte-level tokenizer).
const std::string& byte_level_tokenizer_json();

// 64-bit hash of kind() and serialize(): equal for tokenizers that tokenize alike (token caches
// and resumed runs check it).
uint64_t tokenizer_fingerprint(const Tokenizer& tokenizer);

}  // namespace retnet
