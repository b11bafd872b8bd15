#pragma once
// Training a SentencePiece tokenizer on a text file (`retnet tokenizer train`). The models it
// writes are lossless (identity normalization, whitespace kept, no dummy-prefix space, byte
// fallback, the line break a piece of its own), so decode(encode(text)) == text for any UTF-8 and
// the per-token bytes of a sequence concatenate to its text.
#include <cstdint>
#include <string>

namespace retnet {

struct SentencePieceTrainOptions {
  std::string data;  // text file; each line is a training sentence
  int64_t vocab_size = 8000;
  std::string model_type = "unigram";  // "unigram" or "bpe"
  double character_coverage = 1.0;     // share of characters the vocabulary must cover
  bool byte_fallback = true;           // rare characters as UTF-8 byte pieces instead of <unk>
  int64_t max_sentences = 2000000;     // lines sampled for training (seeded)
  uint32_t seed = 1;
  bool verbose = false;  // SentencePiece's own progress log on stderr
};

// Trains and returns the serialized model (the bytes of a `.model` file); throws Error naming the
// file and SentencePiece's reason (vocabulary too small or too large for the text, empty file...).
std::string train_sentencepiece(const SentencePieceTrainOptions& options);

}  // namespace retnet
