#pragma once
// The prompt cache's disk tier (`retnet serve --cache-dir`): cached states also written to files,
// so that they serve requests after a restart or after the memory tier evicted them. A file holds
// the tokens it was keyed by (checksummed) and a state file (checksummed, tied to the model's
// fingerprint); its name carries the fingerprint, so models can share a directory. A damaged or
// foreign file is skipped with a log line, never trusted. Writes are atomic and happen on a
// background thread; the directory is kept within a byte bound, least recently used out first.
// States are written as float32 or (--cache-type bf16) bfloat16, which the state file's header
// records; a lookup reads either kind (a bfloat16 state widened), whichever kind the server writes.
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "retnet/infer/state_file.h"
#include "retnet/model/model.h"

namespace retnet::server {

class DiskPromptCache {
 public:
  using Log = std::function<void(const std::string&)>;
  // Indexes the directory's files of this model (reading their keys, not their states).
  // `dtype`: how the states it writes are stored.
  DiskPromptCache(std::string dir, int64_t capacity_bytes, const Model& model, uint64_t fingerprint,
                  Log log, StateDtype dtype = StateDtype::F32);
  ~DiskPromptCache();  // writes what is queued
  DiskPromptCache(const DiskPromptCache&) = delete;
  DiskPromptCache& operator=(const DiskPromptCache&) = delete;

  struct Hit {
    int64_t length = 0;  // tokens of the prompt the state consumed
    SavedSequence sequence;
  };
  // The state of the longest cached prefix of `tokens` longer than `longer_than` tokens, read and
  // checked; none when there is none (a file that fails its checks is logged and dropped).
  std::optional<Hit> find_longest_prefix(std::span<const int32_t> tokens, int64_t longer_than);
  // Queues the state after `tokens` for writing (its bytes are taken now).
  void insert(std::span<const int32_t> tokens, const SavedSequence& sequence);
  // Waits until every queued file is written.
  void flush();

  int64_t bytes() const;
  int64_t entries() const;

  // The file format, for tests: key tokens and a state file in one blob, and its name.
  static std::string encode(std::span<const int32_t> tokens, const std::string& state_file);
  // The key of an encoded file; Error naming `path` when it is damaged. `state_offset` is where
  // the state file starts.
  static std::vector<int32_t> decode_key(const std::string& bytes, const std::string& path,
                                         size_t* state_offset);

 private:
  struct Entry {
    std::vector<int32_t> tokens;
    std::string path;
    int64_t bytes = 0;
    uint64_t used = 0;  // a counter: larger is more recent
  };
  std::string path_for(std::span<const int32_t> tokens) const;
  void index_directory();
  void evict_locked();
  void drop_locked(size_t i, bool remove_file);
  void writer_loop();

  const std::string dir_;
  const int64_t capacity_bytes_;
  const Model& model_;
  const uint64_t fingerprint_;
  const Log log_;
  const StateDtype dtype_;

  mutable std::mutex mutex_;  // the index and the queue
  std::vector<Entry> entries_;
  int64_t bytes_ = 0;
  uint64_t clock_ = 0;
  std::deque<std::pair<std::string, std::string>> queue_;  // (path, bytes) to write
  std::string writing_;  // the path being written ("": none)
  bool stopping_ = false;
  std::condition_variable wake_, idle_;
  std::thread writer_;
};

}  // namespace retnet::server
