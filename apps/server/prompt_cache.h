#pragma once
// The prompt cache: sequence states (Session::snapshot) keyed by the tokens they consumed, kept in
// an LRU bounded in bytes. A recurrent model's state has a fixed size whatever the prefix length,
// so caching a long conversation costs one state, not a KV cache per token.
#include <cstdint>
#include <list>
#include <memory>
#include <span>
#include <vector>

#include "prompt_cache_disk.h"
#include "retnet/infer/state_file.h"

namespace retnet::server {

class PromptCache {
 public:
  // `bf16`: the memory tier keeps each state and token cache as bfloat16 (half the bytes; every
  // value rounded to 8 significant bits) and widens it back when found. An attached disk tier
  // stores the kind it was made with (the server makes both of --cache-type).
  explicit PromptCache(int64_t capacity_bytes, bool bf16 = false)
      : capacity_bytes_(capacity_bytes), bf16_(bf16) {}

  // Adds a disk tier: inserted states are also written there, and a lookup reads a longer prefix
  // from it when memory has none (that state then joins the memory tier).
  void attach_disk(std::unique_ptr<DiskPromptCache> disk) { disk_ = std::move(disk); }
  DiskPromptCache* disk() const { return disk_.get(); }
  int64_t disk_hits() const { return disk_hits_; }

  // The entry with the longest key that is a prefix of `tokens` (the key's length is at most
  // tokens.size()); null when none. The entry becomes the most recently used. The pointer stays
  // valid until the next insert or find.
  const SavedSequence* find_longest_prefix(std::span<const int32_t> tokens, int64_t* length);
  // Adds (or refreshes) the state after `tokens`, evicting the least recently used entries to stay
  // within the capacity. A state larger than the whole capacity is not kept.
  void insert(std::vector<int32_t> tokens, SavedSequence sequence);

  int64_t bytes() const { return bytes_; }
  int64_t entries() const { return static_cast<int64_t>(lru_.size()); }
  int64_t capacity_bytes() const { return capacity_bytes_; }

 private:
  struct Entry {
    std::vector<int32_t> tokens;
    SavedSequence sequence;                  // with bf16: state and cache empty, kept below
    std::vector<uint16_t> state16, cache16;  // bf16 only
    int64_t bytes = 0;
  };
  static int64_t entry_bytes(const Entry& e);
  const SavedSequence* widened(const Entry& e);  // the entry's sequence in f32

  void insert_in_memory(std::vector<int32_t> tokens, SavedSequence sequence);

  int64_t capacity_bytes_;
  int64_t bytes_ = 0;
  std::list<Entry> lru_;  // most recently used first
  std::unique_ptr<DiskPromptCache> disk_;
  int64_t disk_hits_ = 0;
  bool bf16_ = false;
  SavedSequence widened_;  // the last bf16 entry found, in f32
};

}  // namespace retnet::server
