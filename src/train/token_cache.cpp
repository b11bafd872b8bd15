#include "retnet/train/token_cache.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <fstream>

#include "retnet/core/error.h"
#include "retnet/core/file_checks.h"
#include "retnet/core/safetensors.h"

namespace retnet {
namespace {

constexpr char kMagic[8] = {'R', 'N', 'T', 'O', 'K', 'C', 'A', 'C'};
constexpr uint32_t kVersion = 1;
constexpr size_t kSampleBytes = 1 << 20;

struct Header {
  char magic[8];
  uint32_t version;
  uint32_t header_bytes;
  uint64_t tokenizer_fingerprint;
  uint64_t data_size;
  int64_t data_mtime_ns;
  uint64_t data_sample_hash;
  double val_fraction;
  uint64_t train_bytes, val_bytes;
  uint64_t train_tokens, val_tokens;
  uint64_t checksum;  // of this header (with checksum = 0) and the tokens
};
static_assert(sizeof(Header) == 96 && sizeof(Header) % alignof(int32_t) == 0);

// A 64-bit hash that reads 8 bytes per step (the tokens of a large corpus are checked on every
// load, so byte-at-a-time FNV would be the slow part). Detects damage, not tampering.
uint64_t hash_bytes(const void* data, size_t n, uint64_t h) {
  const auto* p = static_cast<const uint8_t*>(data);
  auto mix = [&h](uint64_t w) {
    h = std::rotl((h ^ w) * 0x9E3779B97F4A7C15ull, 29) * 0xBF58476D1CE4E5B9ull;
  };
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    std::memcpy(&w, p + i, 8);
    mix(w);
  }
  uint64_t tail = 0;
  std::memcpy(&tail, p + i, n - i);
  mix(tail ^ (static_cast<uint64_t>(n) << 56));
  return h;
}

uint64_t checksum_of(Header header, const int32_t* tokens, size_t count) {
  header.checksum = 0;
  return hash_bytes(tokens, count * sizeof(int32_t), hash_bytes(&header, sizeof header, 0));
}

}  // namespace

TokenCacheKey TokenCacheKey::of(const std::string& data_path, uint64_t tokenizer_fingerprint,
                                double val_fraction) {
  const int fd = open_regular_file(data_path, "training data");
  struct stat st {};
  const bool stat_ok = ::fstat(fd, &st) == 0;
  const int stat_err = errno;
  TokenCacheKey key;
  key.tokenizer_fingerprint = tokenizer_fingerprint;
  key.data_size = static_cast<uint64_t>(st.st_size);
  key.data_mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  key.val_fraction = val_fraction;
  // The first and the last MiB: an edit that keeps the size and the time is caught there.
  std::string sample(std::min<uint64_t>(key.data_size, kSampleBytes), '\0');
  auto read_at = [&](uint64_t offset) {
    size_t got = 0;
    while (got < sample.size()) {
      const ssize_t n = ::pread(fd, sample.data() + got, sample.size() - got,
                                static_cast<off_t>(offset + got));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      got += static_cast<size_t>(n);
    }
    return got;
  };
  uint64_t h = stat_ok ? hash_bytes(sample.data(), read_at(0), 0) : 0;
  if (stat_ok && key.data_size > kSampleBytes)
    h = hash_bytes(sample.data(), read_at(key.data_size - sample.size()), h);
  ::close(fd);
  RETNET_CHECK(stat_ok, "cannot read training data '{}': {}", data_path, std::strerror(stat_err));
  key.data_sample_hash = h;
  return key;
}

std::optional<CachedTokens> load_token_cache(const std::string& path, const TokenCacheKey& key,
                                             int64_t vocab_size, std::string* why_not) {
  auto fail = [&](std::string reason) -> std::optional<CachedTokens> {
    if (why_not) *why_not = std::move(reason);
    return std::nullopt;
  };
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return fail("missing");
  std::shared_ptr<const MappedFile> file;
  try {
    file = map_file_readonly(path);
  } catch (const Error& e) {
    return fail(e.what());
  }
  Header h;
  if (file->size < sizeof h) return fail(fmt::format("truncated: {} bytes", file->size));
  std::memcpy(&h, file->data, sizeof h);
  if (std::memcmp(h.magic, kMagic, sizeof kMagic) != 0) return fail("not a token cache");
  if (h.version != kVersion || h.header_bytes != sizeof h)
    return fail(fmt::format("format version {}; this engine writes {}", h.version, kVersion));
  if (h.tokenizer_fingerprint != key.tokenizer_fingerprint)
    return fail("made by another tokenizer");
  if (h.data_size != key.data_size || h.data_mtime_ns != key.data_mtime_ns ||
      h.data_sample_hash != key.data_sample_hash)
    return fail("made from another version of the data file");
  if (h.val_fraction != key.val_fraction) return fail("made with another validation fraction");
  const uint64_t count = h.train_tokens + h.val_tokens;
  if (h.train_tokens > file->size || h.val_tokens > file->size ||
      file->size != sizeof h + count * sizeof(int32_t))
    return fail(fmt::format("truncated or padded: {} bytes for {} tokens", file->size, count));
  const auto* tokens = reinterpret_cast<const int32_t*>(file->data + sizeof h);
  if (checksum_of(h, tokens, count) != h.checksum) return fail("damaged: checksum mismatch");
  for (uint64_t i = 0; i < count; ++i)
    if (tokens[i] < 0 || tokens[i] >= vocab_size)
      return fail(
          fmt::format("token {} at {} is outside the vocabulary of {}", tokens[i], i, vocab_size));
  CachedTokens c;
  c.train = {tokens, static_cast<size_t>(h.train_tokens)};
  c.val = {tokens + h.train_tokens, static_cast<size_t>(h.val_tokens)};
  c.train_bytes = static_cast<int64_t>(h.train_bytes);
  c.val_bytes = static_cast<int64_t>(h.val_bytes);
  c.mapping = std::move(file);
  return c;
}

void write_token_cache(const std::string& path, const TokenCacheKey& key,
                       const std::vector<int32_t>& train, const std::vector<int32_t>& val,
                       int64_t train_bytes, int64_t val_bytes) {
  Header h{};
  std::memcpy(h.magic, kMagic, sizeof kMagic);
  h.version = kVersion;
  h.header_bytes = sizeof h;
  h.tokenizer_fingerprint = key.tokenizer_fingerprint;
  h.data_size = key.data_size;
  h.data_mtime_ns = key.data_mtime_ns;
  h.data_sample_hash = key.data_sample_hash;
  h.val_fraction = key.val_fraction;
  h.train_bytes = static_cast<uint64_t>(train_bytes);
  h.val_bytes = static_cast<uint64_t>(val_bytes);
  h.train_tokens = train.size();
  h.val_tokens = val.size();
  std::string bytes(sizeof h + (train.size() + val.size()) * sizeof(int32_t), '\0');
  auto* tokens = reinterpret_cast<int32_t*>(bytes.data() + sizeof h);
  std::copy(train.begin(), train.end(), tokens);
  std::copy(val.begin(), val.end(), tokens + train.size());
  h.checksum = checksum_of(h, tokens, train.size() + val.size());
  std::memcpy(bytes.data(), &h, sizeof h);
  write_file_atomically(path, bytes);
}

}  // namespace retnet
