#include "retnet/train/data.h"

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <vector>

#include "retnet/core/error.h"
#include "retnet/core/read_file.h"
#include "retnet/core/rng.h"
#include "retnet/train/token_cache.h"

namespace retnet {
namespace {

namespace fs = std::filesystem;

// Refuses what is not a regular file by name ("training data 'x' is a FIFO, ...").
std::string read_text(const std::string& path) { return read_file(path, "training data"); }

struct OwnedTokens {
  std::vector<int32_t> train, val;
};

}  // namespace

int64_t validation_bytes(int64_t text_bytes, double val_fraction) {
  RETNET_CHECK(val_fraction > 0 && val_fraction < 1,
               "validation fraction must be in (0, 1), got {}", val_fraction);
  return static_cast<int64_t>(static_cast<double>(text_bytes) * val_fraction);
}

std::string token_cache_path(const std::string& data_path, const Tokenizer& tokenizer,
                             const std::string& cache_dir) {
  const fs::path data(data_path);
  const fs::path dir = cache_dir.empty() ? data.parent_path() / ".cache" : fs::path(cache_dir);
  return (dir / fmt::format("{}.{}-{:016x}.tokens", data.filename().string(), tokenizer.kind(),
                            tokenizer_fingerprint(tokenizer)))
      .string();
}

TokenDataset TokenDataset::load(const std::string& path, const Tokenizer& tokenizer,
                                const DataOptions& o) {
  const bool cached = o.use_cache && tokenizer.kind() != "bytes";
  TokenDataset d;
  std::optional<TokenCacheKey> key;
  if (cached) {
    key = TokenCacheKey::of(path, tokenizer_fingerprint(tokenizer), o.val_fraction);
    d.cache_path = token_cache_path(path, tokenizer, o.cache_dir);
    std::string why_not;
    if (auto c = load_token_cache(d.cache_path, *key, tokenizer.vocab_size(), &why_not)) {
      d.train = c->train;
      d.val = c->val;
      d.train_bytes = c->train_bytes;
      d.val_bytes = c->val_bytes;
      d.storage = c->mapping;
      d.cache_reused = true;
      return d;
    }
    if (!o.quiet && why_not != "missing")
      std::fprintf(stderr, "token cache %s: %s; rebuilding it\n", d.cache_path.c_str(),
                   why_not.c_str());
  }

  const std::string text = read_text(path);
  check_encodable(tokenizer, text, fmt::format("training data '{}'", path));
  const int64_t n = static_cast<int64_t>(text.size());
  const int64_t n_val = validation_bytes(n, o.val_fraction);
  RETNET_CHECK(n - n_val >= 2 && n_val >= 2, "'{}' holds {} bytes: too little text to train on",
               path, n);
  const auto t0 = std::chrono::steady_clock::now();
  auto owned = std::make_shared<OwnedTokens>();
  const std::string_view view(text);
  owned->train = tokenizer.encode(view.substr(0, static_cast<size_t>(n - n_val)));
  owned->val = tokenizer.encode(view.substr(static_cast<size_t>(n - n_val)));
  d.train_bytes = n - n_val;
  d.val_bytes = n_val;
  if (cached) {
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    try {
      fs::create_directories(fs::path(d.cache_path).parent_path());
      write_token_cache(d.cache_path, *key, owned->train, owned->val, d.train_bytes, d.val_bytes);
      // Train from the mapping like a later run will, and free the vectors.
      if (auto c = load_token_cache(d.cache_path, *key, tokenizer.vocab_size())) {
        d.train = c->train;
        d.val = c->val;
        d.storage = c->mapping;
      }
      if (!o.quiet)
        std::fprintf(stderr,
                     "tokenized %s: %lld bytes -> %zu tokens in %.2f s (%.1f MB/s); cached in %s\n",
                     path.c_str(), (long long)n, owned->train.size() + owned->val.size(), seconds,
                     static_cast<double>(n) / seconds / 1e6, d.cache_path.c_str());
    } catch (const std::exception& e) {
      if (!o.quiet)
        std::fprintf(stderr,
                     "warning: cannot write the token cache (%s); the tokens stay in memory\n",
                     e.what());
    }
  }
  if (!d.storage) {
    d.train = owned->train;
    d.val = owned->val;
    d.storage = owned;
  }
  return d;
}

void sample_batch(std::span<const int32_t> tokens, int64_t B, int64_t T, uint64_t seed,
                  uint64_t draw, int32_t* inputs, int32_t* targets, int64_t first_row) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  RETNET_CHECK(n >= T + 1, "{} tokens cannot fill a window of {} + 1", n, T);
  Philox rng(seed);
  for (int64_t b = 0; b < B; ++b) {
    const auto bits = rng.block(/*stream=*/0x5eed0000u + draw, static_cast<uint64_t>(first_row + b));
    const uint64_t r = (static_cast<uint64_t>(bits[0]) << 32) | bits[1];
    const int64_t off = static_cast<int64_t>(r % static_cast<uint64_t>(n - T));
    for (int64_t t = 0; t < T; ++t) {
      inputs[b * T + t] = tokens[off + t];
      targets[b * T + t] = tokens[off + t + 1];
    }
  }
}

}  // namespace retnet
