#include "retnet/text/tokenizer_training.h"

#include <sentencepiece_trainer.h>

#include <filesystem>
#include <fstream>
#include <unordered_map>

#include "retnet/core/error.h"
#include "retnet/core/parallel.h"
#include "retnet/text/utf8.h"
#include "sentencepiece_status.h"

namespace sentencepiece {
// Exported by libsentencepiece but not declared in Debian's headers (0.1.97): seeds the sampling
// of training sentences, so that a seed gives the same tokenizer.
void SetRandomGeneratorSeed(unsigned int seed);
}  // namespace sentencepiece

namespace retnet {
namespace {

// SentencePiece skips sentences longer than its max_sentence_length (4192 bytes); long lines are
// cut into pieces below that, at a space when there is one, never inside a UTF-8 character.
constexpr size_t kMaxSentenceBytes = 4000;

// Lines that are not UTF-8 end the iteration with error() set: SentencePiece would train on them
// as U+FFFD, and no exception may cross its code.
class LineIterator final : public sentencepiece::SentenceIterator {
 public:
  explicit LineIterator(const std::string& path) : path_(path), in_(path, std::ios::binary) {
    Next();
  }
  bool done() const override { return done_; }
  const std::string& value() const override { return value_; }
  sentencepiece::util::Status status() const override { return {}; }
  const std::string& error() const { return error_; }
  void Next() override {
    while (rest_.empty()) {
      if (!std::getline(in_, rest_)) {
        done_ = true;
        return;
      }
      try {
        require_utf8(rest_, fmt::format("training text '{}'", path_), offset_);
      } catch (const Error& e) {
        error_ = e.what();
        done_ = true;
        return;
      }
      offset_ += rest_.size() + 1;
    }
    size_t cut = rest_.size();
    if (cut > kMaxSentenceBytes) {
      cut = rest_.rfind(' ', kMaxSentenceBytes);
      if (cut == std::string::npos || cut == 0) {
        cut = kMaxSentenceBytes;
        while (cut > 0 && (static_cast<unsigned char>(rest_[cut]) & 0xC0) == 0x80) --cut;
      }
    }
    value_ = rest_.substr(0, cut);
    rest_.erase(0, cut);
  }

 private:
  std::string path_;
  std::ifstream in_;
  std::string value_, rest_, error_;
  size_t offset_ = 0;  // of the next line in the file
  bool done_ = false;
};

}  // namespace

std::string train_sentencepiece(const SentencePieceTrainOptions& o) {
  namespace fs = std::filesystem;
  std::error_code ec;
  RETNET_CHECK(fs::is_regular_file(o.data, ec),
               "training text '{}' does not exist or is not a file", o.data);
  RETNET_CHECK(fs::file_size(o.data, ec) > 0, "training text '{}' is empty", o.data);
  RETNET_CHECK(o.model_type == "unigram" || o.model_type == "bpe",
               "model type '{}' is not one of: unigram, bpe", o.model_type);
  RETNET_CHECK(o.vocab_size >= 8 && o.vocab_size <= (1 << 24),
               "vocabulary size {} is out of range; expected 8 to 16777216", o.vocab_size);
  RETNET_CHECK(o.character_coverage > 0 && o.character_coverage <= 1,
               "character coverage {} is out of range; expected (0, 1]", o.character_coverage);
  RETNET_CHECK(o.max_sentences >= 1, "max sentences must be >= 1, got {}", o.max_sentences);

  const std::unordered_map<std::string, std::string> args = {
      {"model_prefix", ""},  // the model comes back as bytes; nothing is written
      {"vocab_size", std::to_string(o.vocab_size)},
      {"model_type", o.model_type},
      {"character_coverage", std::to_string(o.character_coverage)},
      {"byte_fallback", o.byte_fallback ? "true" : "false"},
      {"input_sentence_size", std::to_string(o.max_sentences)},
      {"shuffle_input_sentence", "true"},
      {"num_threads", std::to_string(num_threads())},
      // Lossless: the text as it is, spaces and line breaks included.
      {"normalization_rule_name", "identity"},
      {"remove_extra_whitespaces", "false"},
      {"add_dummy_prefix", "false"},
      {"user_defined_symbols", "\n"},
      {"minloglevel", o.verbose ? "0" : "2"},
  };
  sentencepiece::SetRandomGeneratorSeed(o.seed);
  LineIterator lines(o.data);
  std::string model;
  const auto status = sentencepiece::SentencePieceTrainer::Train(args, &lines, &model);
  RETNET_CHECK(lines.error().empty(), "{}", lines.error());
  RETNET_CHECK(status.ok(), "cannot train a {} tokenizer of {} pieces on '{}': {}", o.model_type,
               o.vocab_size, o.data, sentencepiece_reason(status));
  RETNET_CHECK(!model.empty(), "SentencePiece trained on '{}' but returned no model", o.data);
  return model;
}

}  // namespace retnet
