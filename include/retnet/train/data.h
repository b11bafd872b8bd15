#pragma once
// Training data: a text file as byte-level tokens (vocabulary 256: any text, no tokenizer to
// train), split deterministically into training and validation parts (the last fraction of the
// file), and batches drawn by a counter-based RNG so that batch k is a pure function of
// (seed, k): resuming at step k sees exactly the batches an uninterrupted run would.
#include <cstdint>
#include <string>
#include <vector>

namespace retnet {

struct TokenDataset {
  std::vector<int32_t> train, val;
  int64_t train_bytes = 0, val_bytes = 0;  // text bytes behind each part (for bits per byte)

  // Byte-level tokens of a text file; the last val_fraction of it is the validation part.
  static TokenDataset from_text_file(const std::string& path, double val_fraction = 0.1);
};

// B windows of T + 1 consecutive tokens at offsets drawn for (seed, draw): inputs [B, T] and the
// next-token targets [B, T].
void sample_batch(const std::vector<int32_t>& tokens, int64_t B, int64_t T, uint64_t seed,
                  uint64_t draw, int32_t* inputs, int32_t* targets);

}  // namespace retnet
