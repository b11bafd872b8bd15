// Training data: the byte-level split as it always was, the token cache (reused, rebuilt when the
// data, the tokenizer or the split changes, when damaged or truncated, skipped when it cannot be
// written), and seeded batches.
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <thread>

#include "retnet/core/error.h"
#include "retnet/train/data.h"
#include "retnet/train/token_cache.h"
#include "test_helpers.h"
#include "tokenizer_fixture.h"

using namespace retnet;
namespace fs = std::filesystem;

namespace {

class Data : public ::testing::Test {
 protected:
  void SetUp() override {
    dir = test::fresh_temp_dir("data");
    text = test::corpus_prefix(100000);
    data = test::write_file(dir / "corpus.txt", text);
    tokenizer = load_tokenizer(test::test_tokenizer_path());
    options.quiet = true;
  }
  void TearDown() override { fs::remove_all(dir); }

  // The tokens a dataset must hold: each part of the split tokenized alone.
  void expect_tokens_of(const TokenDataset& d, const std::string& content, double fraction = 0.1) {
    const size_t n_val = static_cast<size_t>(content.size() * fraction);
    const size_t n_train = content.size() - n_val;
    EXPECT_EQ(d.train_bytes, static_cast<int64_t>(n_train));
    EXPECT_EQ(d.val_bytes, static_cast<int64_t>(n_val));
    const auto train = tokenizer->encode(std::string_view(content).substr(0, n_train));
    const auto val = tokenizer->encode(std::string_view(content).substr(n_train));
    ASSERT_EQ(d.train.size(), train.size());
    ASSERT_EQ(d.val.size(), val.size());
    EXPECT_TRUE(std::equal(train.begin(), train.end(), d.train.begin()));
    EXPECT_TRUE(std::equal(val.begin(), val.end(), d.val.begin()));
  }

  fs::path dir;
  std::string text, data;
  std::unique_ptr<Tokenizer> tokenizer;
  DataOptions options;
};

void overwrite(const std::string& path, const std::string& content) {
  // A later modification time than the cache's, on any file system's clock resolution.
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  std::ofstream(path, std::ios::binary | std::ios::trunc) << content;
}

}  // namespace

TEST_F(Data, BytesAreTheFileSplitAtTheLastTenthWithNoCache) {
  auto bytes = make_byte_tokenizer();
  TokenDataset d = TokenDataset::load(data, *bytes, options);
  const size_t n_val = text.size() / 10;  // floor(100000 * 0.1)
  ASSERT_EQ(d.train.size(), text.size() - n_val);
  ASSERT_EQ(d.val.size(), n_val);
  for (size_t i = 0; i < text.size(); ++i) {
    const int32_t t = i < d.train.size() ? d.train[i] : d.val[i - d.train.size()];
    ASSERT_EQ(t, static_cast<unsigned char>(text[i])) << i;
  }
  EXPECT_EQ(d.train_bytes + d.val_bytes, static_cast<int64_t>(text.size()));
  EXPECT_TRUE(d.cache_path.empty());
  EXPECT_FALSE(fs::exists(dir / ".cache"));
  EXPECT_EQ(validation_bytes(7, 0.1), 0);
  EXPECT_THROW(validation_bytes(100, 1.0), Error);
}

TEST_F(Data, TokenCacheIsBuiltOnceThenReused) {
  TokenDataset first = TokenDataset::load(data, *tokenizer, options);
  EXPECT_FALSE(first.cache_reused);
  EXPECT_EQ(first.cache_path, token_cache_path(data, *tokenizer));
  EXPECT_EQ(fs::path(first.cache_path).parent_path(), dir / ".cache");
  ASSERT_TRUE(fs::exists(first.cache_path));
  expect_tokens_of(first, text);
  const auto written = fs::last_write_time(first.cache_path);

  TokenDataset second = TokenDataset::load(data, *tokenizer, options);
  EXPECT_TRUE(second.cache_reused);
  EXPECT_EQ(fs::last_write_time(second.cache_path), written);  // read, not rewritten
  expect_tokens_of(second, text);
  // Without a cache, the same tokens.
  DataOptions no_cache = options;
  no_cache.use_cache = false;
  TokenDataset direct = TokenDataset::load(data, *tokenizer, no_cache);
  EXPECT_TRUE(direct.cache_path.empty());
  expect_tokens_of(direct, text);
}

TEST_F(Data, TokenCacheIsRebuiltWhenTheDataFileChanges) {
  TokenDataset first = TokenDataset::load(data, *tokenizer, options);
  // Same size, one word changed.
  std::string edited = text;
  edited.replace(50000, 5, "XXXXX");
  overwrite(data, edited);
  TokenDataset second = TokenDataset::load(data, *tokenizer, options);
  EXPECT_FALSE(second.cache_reused);
  expect_tokens_of(second, edited);
  // Text appended.
  overwrite(data, edited + "More text.\n");
  TokenDataset third = TokenDataset::load(data, *tokenizer, options);
  EXPECT_FALSE(third.cache_reused);
  expect_tokens_of(third, edited + "More text.\n");
  EXPECT_TRUE(TokenDataset::load(data, *tokenizer, options).cache_reused);
}

TEST_F(Data, TokenCacheBelongsToOneTokenizerAndSplit) {
  TokenDataset a = TokenDataset::load(data, *tokenizer, options);
  auto other = load_tokenizer(test::test_tokenizer_path(400, "bpe"));
  TokenDataset b = TokenDataset::load(data, *other, options);
  EXPECT_FALSE(b.cache_reused);
  EXPECT_NE(b.cache_path, a.cache_path);
  // A cache put where another tokenizer's belongs is recognised as not its own.
  fs::copy_file(a.cache_path, b.cache_path, fs::copy_options::overwrite_existing);
  std::string why;
  const auto key = TokenCacheKey::of(data, tokenizer_fingerprint(*other), 0.1);
  EXPECT_FALSE(load_token_cache(b.cache_path, key, other->vocab_size(), &why).has_value());
  EXPECT_EQ(why, "made by another tokenizer");
  TokenDataset rebuilt = TokenDataset::load(data, *other, options);
  EXPECT_FALSE(rebuilt.cache_reused);
  EXPECT_EQ(rebuilt.train.size(), other->encode(std::string_view(text).substr(0, 90000)).size());
  // Another validation fraction is another split.
  DataOptions fifth = options;
  fifth.val_fraction = 0.2;
  TokenDataset c = TokenDataset::load(data, *tokenizer, fifth);
  EXPECT_FALSE(c.cache_reused);
  expect_tokens_of(c, text, 0.2);
}

TEST_F(Data, DamagedOrTruncatedCacheIsRebuiltNotTrusted) {
  const std::string cache = TokenDataset::load(data, *tokenizer, options).cache_path;
  const auto size = fs::file_size(cache);
  auto damage = [&](std::streamoff offset, const std::string& bytes) {
    std::fstream f(cache, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(offset);
    f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  };
  const std::vector<std::function<void()>> harms = {
      [&] { damage(static_cast<std::streamoff>(size / 2), "\x07\x00\x00\x00"); },  // a token
      [&] { damage(60, "\x01"); },                                                 // a header field
      [&] { damage(0, "NOTACACHE"); },                                             // the magic
      [&] { fs::resize_file(cache, size - 4); },                                   // truncated
      [&] { fs::resize_file(cache, 50); },                                // cut in the header
      [&] { std::ofstream(cache, std::ios::binary | std::ios::trunc); },  // emptied
  };
  for (size_t i = 0; i < harms.size(); ++i) {
    harms[i]();
    TokenDataset d = TokenDataset::load(data, *tokenizer, options);
    EXPECT_FALSE(d.cache_reused) << "harm " << i;
    expect_tokens_of(d, text);
    EXPECT_EQ(fs::file_size(cache), size) << "harm " << i;
    EXPECT_TRUE(TokenDataset::load(data, *tokenizer, options).cache_reused) << "harm " << i;
  }
}

TEST_F(Data, UnwritableCacheDirectoryKeepsTheTokensInMemory) {
  DataOptions o = options;
  o.cache_dir = data + "/cannot-be-a-directory";  // under a regular file
  TokenDataset d = TokenDataset::load(data, *tokenizer, o);
  EXPECT_FALSE(d.cache_reused);
  expect_tokens_of(d, text);
}

TEST_F(Data, TooLittleTextIsAnError) {
  std::ofstream(data, std::ios::binary | std::ios::trunc) << "tiny";
  EXPECT_THROW(TokenDataset::load(data, *tokenizer, options), Error);
  EXPECT_THROW(TokenDataset::load((dir / "missing.txt").string(), *tokenizer, options), Error);
}

TEST(Batches, AreAPureFunctionOfSeedAndDraw) {
  std::vector<int32_t> tokens(1000);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>(i);
  const int64_t B = 3, T = 16;
  std::vector<int32_t> in1(B * T), tgt1(B * T), in2(B * T), tgt2(B * T);
  sample_batch(tokens, B, T, 7, 5, in1.data(), tgt1.data());
  sample_batch(tokens, B, T, 7, 5, in2.data(), tgt2.data());
  EXPECT_EQ(in1, in2);
  EXPECT_EQ(tgt1, tgt2);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) {
      EXPECT_EQ(tgt1[b * T + t], in1[b * T + t] + 1);  // targets are the next tokens
      if (t > 0) {
        EXPECT_EQ(in1[b * T + t], in1[b * T + t - 1] + 1);  // windows are contiguous
      }
    }
  sample_batch(tokens, B, T, 7, 6, in2.data(), tgt2.data());
  EXPECT_NE(in1, in2);
  EXPECT_THROW(sample_batch(std::vector<int32_t>(10), 1, 16, 1, 0, in1.data(), tgt1.data()), Error);
}
