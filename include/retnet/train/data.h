#pragma once
// Training data: a text file as tokens of a tokenizer, split deterministically into training and
// validation parts, and batches drawn by a counter-based RNG so that batch k is a pure function
// of (seed, k): resuming at step k sees exactly the batches an uninterrupted run would.
//
// The split is made on the text, in bytes: the last floor(size * val_fraction) bytes are the
// validation part, and each part is tokenized on its own, so bits per byte divides by the exact
// text bytes behind each part, whatever the tokenizer. With the byte tokenizer the tokens are the
// file's bytes. With any other, the tokens are kept in a token cache (train/token_cache.h) that
// later runs memory-map instead of tokenizing again.
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "retnet/text/tokenizer.h"

namespace retnet {

struct DataOptions {
  double val_fraction = 0.1;
  // Where token caches live; empty: a ".cache" directory next to the data file.
  std::string cache_dir;
  // The byte tokenizer never uses one: its tokens are the file's bytes, read as fast as a cache.
  bool use_cache = true;
  bool quiet = false;  // no note on stderr when a cache is built or cannot be written
};

struct TokenDataset {
  std::span<const int32_t> train, val;
  int64_t train_bytes = 0, val_bytes = 0;  // text bytes behind each part (for bits per byte)
  std::string cache_path;                  // the token cache read or written; "" when none
  bool cache_reused = false;               // loaded from a valid cache, nothing tokenized
  std::shared_ptr<const void> storage;     // owns the tokens (a mapping or vectors)

  static TokenDataset load(const std::string& path, const Tokenizer& tokenizer,
                           const DataOptions& options = {});
};

// Bytes of the validation part of a text of `text_bytes` bytes: floor(text_bytes * fraction).
int64_t validation_bytes(int64_t text_bytes, double val_fraction);

// Where the token cache of a data file and a tokenizer lives:
// DIR/<file name>.<kind>-<fingerprint>.tokens, DIR being cache_dir or .cache next to the file.
std::string token_cache_path(const std::string& data_path, const Tokenizer& tokenizer,
                             const std::string& cache_dir = "");

// B windows of T + 1 consecutive tokens at offsets drawn for (seed, draw): inputs [B, T] and the
// next-token targets [B, T]. Row b's offset depends on (seed, draw, first_row + b) alone, so the
// ranks of a data-parallel job, each drawing its rows of a larger batch from first_row on, see
// exactly the rows one process drawing the whole batch sees.
void sample_batch(std::span<const int32_t> tokens, int64_t B, int64_t T, uint64_t seed,
                  uint64_t draw, int32_t* inputs, int32_t* targets, int64_t first_row = 0);

}  // namespace retnet
