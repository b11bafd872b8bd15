#include "prompt_cache.h"

#include <algorithm>

#include "retnet/core/half.h"

namespace retnet::server {

int64_t PromptCache::entry_bytes(const Entry& e) {
  const auto& s = e.sequence;
  const size_t floats = s.state.size() + s.cache.size() + s.logits.size();
  const size_t ints = s.recent.size() + e.tokens.size();
  const size_t halves = e.state16.size() + e.cache16.size();
  return static_cast<int64_t>(floats * sizeof(float) + ints * sizeof(int32_t) +
                              halves * sizeof(uint16_t) + s.text_tail.size() + sizeof(Entry));
}

const SavedSequence* PromptCache::widened(const Entry& e) {
  if (!bf16_) return &e.sequence;
  widened_ = e.sequence;
  widened_.state.resize(e.state16.size());
  for (size_t i = 0; i < e.state16.size(); ++i) widened_.state[i] = bf16_to_float(e.state16[i]);
  widened_.cache.resize(e.cache16.size());
  for (size_t i = 0; i < e.cache16.size(); ++i) widened_.cache[i] = bf16_to_float(e.cache16[i]);
  return &widened_;
}

const SavedSequence* PromptCache::find_longest_prefix(std::span<const int32_t> tokens,
                                                      int64_t* length) {
  auto best = lru_.end();
  for (auto it = lru_.begin(); it != lru_.end(); ++it) {
    const auto& key = it->tokens;
    if (key.size() > tokens.size()) continue;
    if (best != lru_.end() && key.size() <= best->tokens.size()) continue;
    if (std::equal(key.begin(), key.end(), tokens.begin())) best = it;
  }
  const int64_t in_memory = best == lru_.end() ? 0 : static_cast<int64_t>(best->tokens.size());
  if (disk_) {
    if (auto hit = disk_->find_longest_prefix(tokens, in_memory)) {
      const auto n = static_cast<size_t>(hit->length);
      // A state larger than the whole memory tier is not kept (nothing is evicted for it), and
      // the memory's own best prefix serves.
      insert_in_memory(std::vector<int32_t>(tokens.begin(), tokens.begin() + n),
                       std::move(hit->sequence));
      if (!lru_.empty() && lru_.front().tokens.size() == n &&
          std::equal(lru_.front().tokens.begin(), lru_.front().tokens.end(), tokens.begin())) {
        ++disk_hits_;
        *length = hit->length;
        return widened(lru_.front());
      }
    }
  }
  if (best == lru_.end()) {
    *length = 0;
    return nullptr;
  }
  lru_.splice(lru_.begin(), lru_, best);
  *length = static_cast<int64_t>(lru_.front().tokens.size());
  return widened(lru_.front());
}

void PromptCache::insert(std::vector<int32_t> tokens, SavedSequence sequence) {
  if (disk_) disk_->insert(tokens, sequence);
  insert_in_memory(std::move(tokens), std::move(sequence));
}

void PromptCache::insert_in_memory(std::vector<int32_t> tokens, SavedSequence sequence) {
  for (auto it = lru_.begin(); it != lru_.end(); ++it)
    if (it->tokens == tokens) {
      bytes_ -= it->bytes;
      lru_.erase(it);
      break;
    }
  Entry e{std::move(tokens), std::move(sequence), {}, {}, 0};
  if (bf16_) {
    const std::pair<std::vector<float>*, std::vector<uint16_t>*> halves[] = {
        {&e.sequence.state, &e.state16}, {&e.sequence.cache, &e.cache16}};
    for (auto [from, to] : halves) {
      to->resize(from->size());
      for (size_t i = 0; i < from->size(); ++i) (*to)[i] = float_to_bf16((*from)[i]);
      std::vector<float>().swap(*from);
    }
  }
  e.bytes = entry_bytes(e);
  if (e.bytes > capacity_bytes_) return;
  while (!lru_.empty() && bytes_ + e.bytes > capacity_bytes_) {
    bytes_ -= lru_.back().bytes;
    lru_.pop_back();
  }
  bytes_ += e.bytes;
  lru_.push_front(std::move(e));
}

}  // namespace retnet::server
