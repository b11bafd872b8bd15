#include "prompt_cache_disk.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "retnet/core/byte_buffer.h"
#include "retnet/core/error.h"
#include "retnet/core/hash.h"
#include "retnet/core/read_file.h"
#include "retnet/core/safetensors.h"

namespace retnet::server {
namespace {

namespace fs = std::filesystem;

constexpr char kMagic[8] = {'R', 'N', 'P', 'R', 'O', 'M', 'P', 'T'};
constexpr uint32_t kVersion = 1;
constexpr size_t kFixed = sizeof kMagic + 4 + 4 + 8;  // magic, version, reserved, token count
constexpr uint64_t kMaxTokens = uint64_t{1} << 28;

}  // namespace

std::string DiskPromptCache::encode(std::span<const int32_t> tokens,
                                    const std::string& state_file) {
  std::string out(kMagic, sizeof kMagic);
  const uint32_t version = kVersion, reserved = 0;
  const uint64_t n = tokens.size();
  append_raw(out, &version, 1);
  append_raw(out, &reserved, 1);
  append_raw(out, &n, 1);
  append_raw(out, tokens.data(), tokens.size());
  const uint64_t sum = fnv1a(out.data(), out.size());
  append_raw(out, &sum, 1);
  return out + state_file;
}

std::vector<int32_t> DiskPromptCache::decode_key(const std::string& bytes, const std::string& path,
                                                 size_t* state_offset) {
  RETNET_CHECK(bytes.size() >= kFixed + 8 && std::memcmp(bytes.data(), kMagic, sizeof kMagic) == 0,
               "'{}' is not a prompt cache file", path);
  uint32_t version = 0;
  uint64_t n = 0;
  std::memcpy(&version, bytes.data() + 8, 4);
  std::memcpy(&n, bytes.data() + 16, 8);
  RETNET_CHECK(version == kVersion,
               "'{}' is a prompt cache file of version {}; this engine reads {}", path, version,
               kVersion);
  RETNET_CHECK(n <= kMaxTokens && kFixed + n * 4 + 8 <= bytes.size(),
               "prompt cache file '{}' is truncated (its key says {} tokens)", path, n);
  const size_t key_end = kFixed + n * 4;
  uint64_t stored = 0;
  std::memcpy(&stored, bytes.data() + key_end, 8);
  RETNET_CHECK(fnv1a(bytes.data(), key_end) == stored,
               "prompt cache file '{}' is damaged (key checksum mismatch)", path);
  std::vector<int32_t> tokens(n);
  if (n > 0) std::memcpy(tokens.data(), bytes.data() + kFixed, n * 4);
  *state_offset = key_end + 8;
  return tokens;
}

DiskPromptCache::DiskPromptCache(std::string dir, int64_t capacity_bytes, const Model& model,
                                 uint64_t fingerprint, Log log, StateDtype dtype)
    : dir_(std::move(dir)),
      capacity_bytes_(capacity_bytes),
      model_(model),
      fingerprint_(fingerprint),
      log_(std::move(log)),
      dtype_(dtype) {
  std::error_code ec;
  fs::create_directories(dir_, ec);
  RETNET_CHECK(fs::is_directory(dir_), "--cache-dir '{}' is not a directory and cannot be made: {}",
               dir_, ec ? ec.message() : "exists as a file");
  index_directory();
  writer_ = std::thread([this] { writer_loop(); });
}

DiskPromptCache::~DiskPromptCache() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  writer_.join();
}

std::string DiskPromptCache::path_for(std::span<const int32_t> tokens) const {
  return fmt::format("{}/{}-{}.prompt", dir_, hex64(fingerprint_),
                     hex64(fnv1a(tokens.data(), tokens.size_bytes())));
}

// Reads each of this model's files' key (not its state); a damaged one is logged and removed, the
// files of other models are left alone.
void DiskPromptCache::index_directory() {
  const std::string prefix = hex64(fingerprint_) + "-";
  std::vector<std::pair<fs::file_time_type, Entry>> found;
  int64_t others = 0;
  for (const auto& item : fs::directory_iterator(dir_)) {
    const std::string name = item.path().filename().string();
    if (!item.is_regular_file() || item.path().extension() != ".prompt") continue;
    if (name.rfind(prefix, 0) != 0) {
      ++others;
      continue;
    }
    const std::string path = item.path().string();
    try {
      std::ifstream in(path, std::ios::binary);
      std::string head(kFixed, '\0');
      in.read(head.data(), static_cast<std::streamsize>(kFixed));
      uint64_t n = 0;
      if (in.gcount() == static_cast<std::streamsize>(kFixed)) std::memcpy(&n, head.data() + 16, 8);
      RETNET_CHECK(n <= kMaxTokens, "prompt cache file '{}' is damaged (its key says {} tokens)",
                   path, n);
      std::string key(n * 4 + 8, '\0');
      in.read(key.data(), static_cast<std::streamsize>(key.size()));
      key.resize(static_cast<size_t>(std::max<std::streamsize>(in.gcount(), 0)));
      size_t offset = 0;
      Entry e{decode_key(head + key, path, &offset), path, static_cast<int64_t>(item.file_size()),
              0};
      RETNET_CHECK(item.file_size() > offset, "prompt cache file '{}' has no state", path);
      found.emplace_back(item.last_write_time(), std::move(e));
    } catch (const std::exception& e) {
      log_(fmt::format("prompt cache: skipping and removing '{}': {}", path, e.what()));
      std::error_code ec;
      fs::remove(path, ec);
    }
  }
  std::sort(found.begin(), found.end(), [](auto& a, auto& b) { return a.first < b.first; });
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& [time, e] : found) {
    e.used = ++clock_;
    bytes_ += e.bytes;
    entries_.push_back(std::move(e));
  }
  evict_locked();
  log_(fmt::format("prompt cache: {} cached states ({} bytes) in '{}'{}", entries_.size(), bytes_,
                   dir_,
                   others > 0 ? fmt::format("; {} files of other models left alone", others) : ""));
}

std::optional<DiskPromptCache::Hit> DiskPromptCache::find_longest_prefix(
    std::span<const int32_t> tokens, int64_t longer_than) {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    size_t best = entries_.size();
    for (size_t i = 0; i < entries_.size(); ++i) {
      const auto& key = entries_[i].tokens;
      if (static_cast<int64_t>(key.size()) <= longer_than || key.size() > tokens.size()) continue;
      if (best < entries_.size() && key.size() <= entries_[best].tokens.size()) continue;
      if (std::equal(key.begin(), key.end(), tokens.begin())) best = i;
    }
    if (best == entries_.size()) return std::nullopt;
    const std::string path = entries_[best].path;
    const std::vector<int32_t> key = entries_[best].tokens;
    // A file being written is read once it is there (the index may change meanwhile: look
    // again); one still queued, from the queue.
    if (writing_ == path) {
      idle_.wait(lock, [&] { return writing_ != path; });
      continue;
    }
    std::string bytes;
    for (const auto& [queued_path, queued] : queue_)
      if (queued_path == path) bytes = queued;
    try {
      lock.unlock();
      if (bytes.empty()) bytes = read_file(path, "prompt cache file");
      size_t offset = 0;
      RETNET_CHECK(decode_key(bytes, path, &offset) == key,
                   "prompt cache file '{}' holds another prompt than its index says", path);
      Hit hit{static_cast<int64_t>(key.size()),
              parse_state_file(bytes.substr(offset), path, model_, fingerprint_)};
      RETNET_CHECK(hit.sequence.position == hit.length,
                   "prompt cache file '{}' holds a state after {} tokens, its key has {}", path,
                   hit.sequence.position, hit.length);
      lock.lock();
      for (auto& e : entries_)
        if (e.path == path) e.used = ++clock_;
      return hit;
    } catch (const std::exception& e) {
      log_(fmt::format("prompt cache: skipping and removing '{}': {}", path, e.what()));
      if (!lock.owns_lock()) lock.lock();
      for (size_t i = 0; i < entries_.size(); ++i)
        if (entries_[i].path == path) {
          drop_locked(i, true);
          break;
        }
    }
  }
}

void DiskPromptCache::insert(std::span<const int32_t> tokens, const SavedSequence& sequence) {
  std::string bytes = encode(tokens, state_file_bytes(model_, fingerprint_, sequence, dtype_));
  const std::string path = path_for(tokens);
  std::lock_guard<std::mutex> lock(mutex_);
  for (size_t i = 0; i < entries_.size(); ++i)
    if (entries_[i].path == path) {
      drop_locked(i, false);
      break;
    }
  const auto size = static_cast<int64_t>(bytes.size());
  if (size > capacity_bytes_) return;
  entries_.push_back({std::vector<int32_t>(tokens.begin(), tokens.end()), path, size, ++clock_});
  bytes_ += size;
  queue_.emplace_back(path, std::move(bytes));
  evict_locked();
  wake_.notify_all();
}

void DiskPromptCache::flush() {
  std::unique_lock<std::mutex> lock(mutex_);
  idle_.wait(lock, [&] { return queue_.empty() && writing_.empty(); });
}

int64_t DiskPromptCache::bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return bytes_;
}

int64_t DiskPromptCache::entries() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return static_cast<int64_t>(entries_.size());
}

void DiskPromptCache::evict_locked() {
  while (bytes_ > capacity_bytes_ && !entries_.empty()) {
    size_t oldest = 0;
    for (size_t i = 1; i < entries_.size(); ++i)
      if (entries_[i].used < entries_[oldest].used) oldest = i;
    drop_locked(oldest, true);
  }
}

void DiskPromptCache::drop_locked(size_t i, bool remove_file) {
  const std::string path = entries_[i].path;
  bytes_ -= entries_[i].bytes;
  entries_.erase(entries_.begin() + static_cast<std::ptrdiff_t>(i));
  std::erase_if(queue_, [&](const auto& q) { return q.first == path; });
  if (remove_file) {
    std::error_code ec;
    fs::remove(path, ec);
  }
}

void DiskPromptCache::writer_loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    wake_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) break;  // stopping, all written
    // Named members, not a structured binding: a lambda below captures the path.
    std::string path = std::move(queue_.front().first);
    std::string bytes = std::move(queue_.front().second);
    queue_.pop_front();
    writing_ = path;
    lock.unlock();
    try {
      write_file_atomically(path, bytes);
    } catch (const std::exception& e) {
      log_(fmt::format("prompt cache: could not write '{}': {}", path, e.what()));
    }
    lock.lock();
    writing_.clear();
    // Evicted (or replaced and written again later) while it was being written: not kept.
    const bool indexed = std::any_of(entries_.begin(), entries_.end(),
                                     [&](const Entry& e) { return e.path == path; });
    if (!indexed) {
      std::error_code ec;
      fs::remove(path, ec);
    }
    idle_.notify_all();
  }
  idle_.notify_all();
}

}  // namespace retnet::server
