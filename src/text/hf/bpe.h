#pragma once
// The BPE model of tokenizer.json: merges applied by rank (lowest first, leftmost on ties) with a
// priority queue over a linked list of a word's symbols; characters outside the vocabulary become
// <0xNN> byte tokens (byte_fallback) or the unknown token.
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace retnet::hf {

class Bpe {
 public:
  struct Options {
    bool byte_fallback = false, ignore_merges = false, fuse_unk = false;
    int32_t unk_id = -1;
  };
  // `vocab`: token -> id; `merges`: pairs of tokens, by rank. Throws std::string naming the bad
  // merge (the caller adds the file and key).
  Bpe(std::unordered_map<std::string, int32_t> vocab,
      const std::vector<std::pair<std::string, std::string>>& merges, Options options);

  // Appends the ids of one pre-tokenized word.
  void encode_word(std::string_view word, std::vector<int32_t>& out) const;
  // Where a word can be cut without changing its tokens: before each `marker` that follows
  // another character, when no token holds the marker after another character (SentencePiece
  // style vocabularies, where "▁" starts pieces). Empty when that does not hold.
  const std::string& cut_marker() const { return cut_marker_; }
  void set_cut_marker(const std::string& marker);

  const std::unordered_map<std::string, int32_t>& vocab() const { return vocab_; }

 private:
  struct Merge {
    int32_t rank, id;
  };
  static uint64_t key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  void emit_unknown(std::string_view chars, std::vector<int32_t>& out) const;

  std::unordered_map<std::string, int32_t> vocab_;
  std::unordered_map<uint64_t, Merge> merges_;
  std::vector<int32_t> ascii_ids_;  // id of each one-byte character, or -1
  int32_t byte_ids_[256];           // id of <0xNN>, or -1
  Options options_;
  std::string cut_marker_;
};

}  // namespace retnet::hf
