#pragma once
// Token cache: a corpus tokenized once into a file that later runs memory-map instead of
// tokenizing again. The file is a 96-byte header and then the training part's tokens followed by
// the validation part's, as int32 (host byte order, little-endian on every supported host).
// The header records what the tokens were made from (the tokenizer's fingerprint; the data file's
// size, modification time and a hash of its first and last MiB; the validation fraction), the text
// bytes and token counts of both parts, and a checksum of itself and the tokens. A cache whose
// record does not match, or that is truncated or damaged, is not trusted: the caller rebuilds it.
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "retnet/core/mapped_file.h"

namespace retnet {

// What a cache must have been built from to be valid.
struct TokenCacheKey {
  uint64_t tokenizer_fingerprint = 0;
  uint64_t data_size = 0;
  int64_t data_mtime_ns = 0;
  uint64_t data_sample_hash = 0;  // of the data file's first and last MiB
  double val_fraction = 0;

  // The key of a data file as it is now, for a tokenizer with this fingerprint.
  static TokenCacheKey of(const std::string& data_path, uint64_t tokenizer_fingerprint,
                          double val_fraction);
};

struct CachedTokens {
  std::span<const int32_t> train, val;  // inside the mapping
  int64_t train_bytes = 0, val_bytes = 0;
  std::shared_ptr<const MappedFile> mapping;
};

// The cache, when it exists, matches `key`, is whole and holds only ids below vocab_size;
// otherwise nullopt, with the reason in *why_not ("missing", "made from another version of the
// data file", "checksum mismatch", ...).
std::optional<CachedTokens> load_token_cache(const std::string& path, const TokenCacheKey& key,
                                             int64_t vocab_size, std::string* why_not = nullptr);

// Writes the cache atomically (temporary file, fsync, rename): readers see the old file or the new
// one, never a part.
void write_token_cache(const std::string& path, const TokenCacheKey& key,
                       const std::vector<int32_t>& train, const std::vector<int32_t>& val,
                       int64_t train_bytes, int64_t val_bytes);

}  // namespace retnet
