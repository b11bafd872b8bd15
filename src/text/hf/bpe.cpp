#include "bpe.h"

#include <queue>

#include "fmt/format.h"
#include "utf8_iter.h"

namespace retnet::hf {
namespace {

struct Symbol {
  int32_t id;           // -1: a character outside the vocabulary
  uint32_t start, len;  // bytes of the word
  int32_t prev, next;   // neighbours in the list, -1 at the ends
};

struct Candidate {
  int32_t rank;
  uint32_t start;  // of the left symbol: ties go to the leftmost pair
  int32_t left, right, id;
  uint32_t left_len, right_len;  // to see that neither symbol has changed since
  bool operator>(const Candidate& o) const {
    return rank != o.rank ? rank > o.rank : start > o.start;
  }
};

}  // namespace

Bpe::Bpe(std::unordered_map<std::string, int32_t> vocab,
         const std::vector<std::pair<std::string, std::string>>& merges, Options options)
    : vocab_(std::move(vocab)), ascii_ids_(128, -1), options_(options) {
  for (int b = 0; b < 256; ++b) {
    auto it = vocab_.find(fmt::format("<0x{:02X}>", b));
    byte_ids_[b] = options_.byte_fallback && it != vocab_.end() ? it->second : -1;
    if (b < 128) {
      auto c = vocab_.find(std::string(1, static_cast<char>(b)));
      ascii_ids_[b] = c == vocab_.end() ? -1 : c->second;
    }
  }
  merges_.reserve(merges.size());
  for (size_t r = 0; r < merges.size(); ++r) {
    const auto& [a, b] = merges[r];
    auto ia = vocab_.find(a), ib = vocab_.find(b), im = vocab_.find(a + b);
    if (ia == vocab_.end() || ib == vocab_.end() || im == vocab_.end())
      throw fmt::format("merge {} ('{} {}') names a token that is not in model.vocab", r, a, b);
    // A pair listed twice takes its last rank, as in HF's tokenizers.
    merges_.insert_or_assign(key(ia->second, ib->second),
                             Merge{static_cast<int32_t>(r), im->second});
  }
}

void Bpe::set_cut_marker(const std::string& marker) {
  cut_marker_.clear();
  if (marker.empty()) return;
  for (const auto& [token, id] : vocab_) {
    for (size_t at = token.find(marker, 1); at != std::string::npos;
         at = token.find(marker, at + 1)) {
      if (at < marker.size() || token.compare(at - marker.size(), marker.size(), marker) != 0)
        return;  // the marker after another character: cutting there could change tokens
    }
  }
  cut_marker_ = marker;
}

void Bpe::emit_unknown(std::string_view chars, std::vector<int32_t>& out) const {
  bool bytes_known = options_.byte_fallback;
  for (char c : chars) bytes_known = bytes_known && byte_ids_[static_cast<uint8_t>(c)] >= 0;
  if (bytes_known) {
    for (char c : chars) out.push_back(byte_ids_[static_cast<uint8_t>(c)]);
  } else if (options_.unk_id >= 0 &&
             !(options_.fuse_unk && !out.empty() && out.back() == options_.unk_id)) {
    out.push_back(options_.unk_id);
  }
}

void Bpe::encode_word(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  if (options_.ignore_merges) {
    auto it = vocab_.find(std::string(word));
    if (it != vocab_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  std::vector<Symbol> syms;
  syms.reserve(word.size());
  std::string one;
  for (size_t i = 0; i < word.size();) {
    const size_t len = char_len(word[i]);
    int32_t id;
    if (len == 1) {
      id = ascii_ids_[static_cast<uint8_t>(word[i])];
    } else {
      one.assign(word.substr(i, len));
      auto it = vocab_.find(one);
      id = it == vocab_.end() ? -1 : it->second;
    }
    const auto n = static_cast<int32_t>(syms.size());
    syms.push_back({id, static_cast<uint32_t>(i), static_cast<uint32_t>(len), n - 1, n + 1});
    i += len;
  }
  syms.back().next = -1;
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue;
  auto consider = [&](int32_t left) {
    const int32_t right = syms[left].next;
    if (right < 0 || syms[left].id < 0 || syms[right].id < 0) return;
    auto it = merges_.find(key(syms[left].id, syms[right].id));
    if (it == merges_.end()) return;
    queue.push({it->second.rank, syms[left].start, left, right, it->second.id, syms[left].len,
                syms[right].len});
  };
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(syms.size()); ++i) consider(i);
  while (!queue.empty()) {
    const Candidate c = queue.top();
    queue.pop();
    Symbol& l = syms[c.left];
    if (l.len != c.left_len || l.next != c.right || syms[c.right].len != c.right_len) continue;
    Symbol& r = syms[c.right];
    l.id = c.id;
    l.len += r.len;
    l.next = r.next;
    r.len = 0;  // gone
    if (l.next >= 0) syms[l.next].prev = c.left;
    if (l.prev >= 0) consider(l.prev);
    consider(c.left);
  }
  for (int32_t i = 0; i >= 0; i = syms[i].next) {
    if (syms[i].id >= 0)
      out.push_back(syms[i].id);
    else
      emit_unknown(word.substr(syms[i].start, syms[i].len), out);
  }
}

}  // namespace retnet::hf
