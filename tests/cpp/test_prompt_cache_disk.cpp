// The prompt cache's disk tier (`retnet serve --cache-dir`): states survive a restart, damaged and
// foreign files are never trusted, the directory stays within its bound.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "prompt_cache.h"
#include "prompt_cache_disk.h"
#include "retnet/model/model.h"
#include "test_helpers.h"

using namespace retnet;
using namespace retnet::server;
namespace fs = std::filesystem;

namespace {

struct DiskCacheTest : ::testing::Test {
  Model model = Model::init(test::tiny_config(), 3);
  uint64_t fingerprint = model_fingerprint(model);
  fs::path dir = test::fresh_temp_dir("prompt_cache_disk");
  std::vector<std::string> log;

  ~DiskCacheTest() override { fs::remove_all(dir); }

  // A state after `tokens`, its floats marked by `mark`.
  SavedSequence state_after(const std::vector<int32_t>& tokens, float mark) {
    SavedSequence s;
    s.position = static_cast<int64_t>(tokens.size());
    s.state.assign(static_cast<size_t>(model.config().state_floats_per_sequence()), mark);
    s.logits.assign(static_cast<size_t>(model.config().vocab_size), -mark);
    s.recent = tokens;
    return s;
  }
  std::unique_ptr<DiskPromptCache> open(int64_t capacity = 1 << 30) {
    return std::make_unique<DiskPromptCache>(
        dir.string(), capacity, model, fingerprint,
        [this](const std::string& line) { log.push_back(line); });
  }
  std::vector<fs::path> files() const {
    std::vector<fs::path> out;
    for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path());
    return out;
  }
  bool logged(const std::string& words) const {
    for (const auto& l : log)
      if (l.find(words) != std::string::npos) return true;
    return false;
  }
};

TEST_F(DiskCacheTest, AStateServesTheLongestPrefixAfterARestart) {
  {
    auto cache = open();
    cache->insert(std::vector<int32_t>{1, 2}, state_after({1, 2}, 2.f));
    cache->insert(std::vector<int32_t>{1, 2, 3}, state_after({1, 2, 3}, 3.f));
  }  // written on destruction
  ASSERT_EQ(files().size(), 2u);
  auto cache = open();
  EXPECT_EQ(cache->entries(), 2);
  const std::vector<int32_t> prompt = {1, 2, 3, 4};
  auto hit = cache->find_longest_prefix(prompt, 0);
  ASSERT_TRUE(hit.has_value());
  EXPECT_EQ(hit->length, 3);
  const SavedSequence expected = state_after({1, 2, 3}, 3.f);
  EXPECT_EQ(hit->sequence.state, expected.state);
  EXPECT_EQ(hit->sequence.logits, expected.logits);
  EXPECT_EQ(hit->sequence.recent, expected.recent);
  // Only a prefix longer than what memory has is read; another prompt finds none.
  EXPECT_FALSE(cache->find_longest_prefix(prompt, 3).has_value());
  const std::vector<int32_t> other = {2, 1};
  EXPECT_FALSE(cache->find_longest_prefix(other, 0).has_value());
}

TEST_F(DiskCacheTest, DamagedFilesAreSkippedAndOtherModelsFilesLeftAlone) {
  {
    auto cache = open();
    cache->insert(std::vector<int32_t>{5, 6}, state_after({5, 6}, 1.f));
    cache->insert(std::vector<int32_t>{7}, state_after({7}, 1.f));
  }
  // One file damaged in its state (found on reading it), one truncated in its key (found on
  // indexing), and a file of another model.
  std::vector<fs::path> paths = files();
  ASSERT_EQ(paths.size(), 2u);
  for (const fs::path& p : paths) {
    std::fstream f(p, std::ios::in | std::ios::out | std::ios::binary);
    const auto size = fs::file_size(p);
    if (p == paths[0]) {
      f.seekp(static_cast<std::streamoff>(size - 20));
      f.put('\x7f');
    } else {
      f.close();
      fs::resize_file(p, 20);
    }
  }
  const fs::path foreign = dir / "0123456789abcdef-0000000000000001.prompt";
  test::write_file(foreign, "not ours");
  auto cache = open();
  EXPECT_EQ(cache->entries(), 1);
  EXPECT_TRUE(logged("skipping and removing")) << testing::PrintToString(log);
  EXPECT_TRUE(logged("1 files of other models left alone")) << testing::PrintToString(log);
  const std::vector<int32_t> a = {5, 6, 1}, b = {7, 1};
  EXPECT_FALSE(cache->find_longest_prefix(a, 0).has_value());
  EXPECT_FALSE(cache->find_longest_prefix(b, 0).has_value());
  EXPECT_TRUE(logged("checksum mismatch")) << testing::PrintToString(log);
  EXPECT_EQ(cache->entries(), 0);
  EXPECT_EQ(files(), std::vector<fs::path>{foreign});  // the damaged ones removed, not the other
}

TEST_F(DiskCacheTest, TheDirectoryStaysWithinItsBound) {
  int64_t one = 0;
  {
    auto probe = open();
    probe->insert(std::vector<int32_t>{1}, state_after({1}, 1.f));
    one = probe->bytes();
  }
  fs::remove_all(dir);
  fs::create_directories(dir);
  auto cache = open(2 * one + one / 2);  // room for two
  cache->insert(std::vector<int32_t>{1}, state_after({1}, 1.f));
  cache->insert(std::vector<int32_t>{2}, state_after({2}, 1.f));
  const std::vector<int32_t> first = {1, 9};
  ASSERT_TRUE(cache->find_longest_prefix(first, 0).has_value());  // {1} the most recent
  cache->insert(std::vector<int32_t>{3}, state_after({3}, 1.f));  // removes {2}
  cache->flush();
  EXPECT_EQ(cache->entries(), 2);
  EXPECT_LE(cache->bytes(), 2 * one + one / 2);
  EXPECT_EQ(files().size(), 2u);
  const std::vector<int32_t> second = {2};
  EXPECT_FALSE(cache->find_longest_prefix(second, 0).has_value());
  EXPECT_TRUE(cache->find_longest_prefix(first, 0).has_value());
}

TEST_F(DiskCacheTest, ThePromptCacheReadsWhatItsMemoryEvicted) {
  PromptCache cache(1 << 20);
  cache.attach_disk(open());
  cache.insert({1, 2}, state_after({1, 2}, 2.f));
  PromptCache restarted(1 << 20);  // a fresh memory tier over the same directory
  cache.disk()->flush();
  restarted.attach_disk(open());
  int64_t n = 0;
  const std::vector<int32_t> prompt = {1, 2, 3};
  const SavedSequence* hit = restarted.find_longest_prefix(prompt, &n);
  ASSERT_NE(hit, nullptr);
  EXPECT_EQ(n, 2);
  EXPECT_EQ(hit->state, state_after({1, 2}, 2.f).state);
  EXPECT_EQ(restarted.disk_hits(), 1);
  EXPECT_EQ(restarted.entries(), 1);  // now in memory: the next lookup does not read the disk
  ASSERT_NE(restarted.find_longest_prefix(prompt, &n), nullptr);
  EXPECT_EQ(restarted.disk_hits(), 1);
}

}  // namespace
