// The Tokenizer of a Hugging Face tokenizer.json: added tokens matched on the raw text (and on
// the normalized text for "normalized" ones), then normalizer, pre-tokenizer and BPE per section.
#include <algorithm>
#include <array>
#include <unordered_map>

#include "../unicode_tables.h"
#include "config.h"
#include "retnet/core/error.h"
#include "retnet/text/tokenizer.h"
#include "retnet/text/utf8.h"
#include "utf8_iter.h"

namespace retnet {
namespace {

using hf::AddedToken;

// Leftmost-longest matching of a set of added tokens.
class AddedMatcher {
 public:
  void add(const std::string& content, const AddedToken* token) {
    by_first_[static_cast<uint8_t>(content[0])].push_back({content, token});
    ++count_;
  }
  // Longest first, ties in the file's order. An insertion sort: the lists are a few entries, and
  // std::stable_sort's temporary buffer trips ASan's alloc-dealloc check with GCC 12's libstdc++.
  void finish() {
    for (auto& list : by_first_)
      for (size_t i = 1; i < list.size(); ++i)
        for (size_t j = i; j > 0 && list[j - 1].first.size() < list[j].first.size(); --j)
          std::swap(list[j - 1], list[j]);
  }
  bool empty() const { return count_ == 0; }
  // The token at pos and its length, or nullptr.
  const AddedToken* match(std::string_view text, size_t pos, size_t* len) const {
    for (const auto& [content, token] : by_first_[static_cast<uint8_t>(text[pos])]) {
      if (text.compare(pos, content.size(), content) == 0) {
        *len = content.size();
        return token;
      }
    }
    return nullptr;
  }

 private:
  std::array<std::vector<std::pair<std::string, const AddedToken*>>, 256> by_first_;
  size_t count_ = 0;
};

struct Section {
  std::string_view text;
  const AddedToken* token = nullptr;  // an added token, else text for the model
};

bool is_space_at(std::string_view s, size_t i, size_t* len) {
  return (unicode_classes(hf::decode_at(s, i, len)) & kSpace) != 0;
}

std::string_view trim_end(std::string_view s) {
  while (!s.empty()) {
    size_t start = s.size() - 1, len;
    while (start > 0 && (static_cast<uint8_t>(s[start]) & 0xC0) == 0x80) --start;
    if (!is_space_at(s, start, &len)) break;
    s = s.substr(0, start);
  }
  return s;
}

std::string_view trim_start(std::string_view s) {
  size_t len;
  while (!s.empty() && is_space_at(s, 0, &len)) s.remove_prefix(len);
  return s;
}

// The text cut at added tokens, with their lstrip/rstrip applied to the neighbouring text.
std::vector<Section> split_added(const AddedMatcher& m, std::string_view text) {
  std::vector<Section> out;
  size_t gap = 0;
  for (size_t pos = 0, len; !m.empty() && pos < text.size();) {
    if (const AddedToken* t = m.match(text, pos, &len)) {
      if (gap < pos) out.push_back({text.substr(gap, pos - gap)});
      out.push_back({text.substr(pos, len), t});
      pos += len;
      gap = pos;
    } else {
      ++pos;
    }
  }
  if (gap < text.size()) out.push_back({text.substr(gap)});
  for (size_t i = 0; i < out.size(); ++i) {
    if (!out[i].token) continue;
    if (out[i].token->lstrip && i > 0 && !out[i - 1].token)
      out[i - 1].text = trim_end(out[i - 1].text);
    if (out[i].token->rstrip && i + 1 < out.size() && !out[i + 1].token)
      out[i + 1].text = trim_start(out[i + 1].text);
  }
  return out;
}

class HfTokenizer final : public Tokenizer {
 public:
  HfTokenizer(const std::string& json_text, const std::string& origin)
      : json_(json_text), c_(hf::parse_config(json_text, origin)) {
    for (const auto& a : c_.added) {
      if (a.normalized && !c_.normalizer.empty()) {
        const std::string n = hf::normalize(c_.normalizer, a.content);
        if (!n.empty()) normalized_.add(n, &a);
      } else {
        raw_.add(a.content, &a);
      }
    }
    raw_.finish();
    normalized_.finish();
    // Cutting words before "▁" is exact for SentencePiece-style vocabularies (see Bpe).
    for (const auto& s : c_.decoder)
      if (s.kind == hf::DecoderStep::kMetaspace ||
          (s.kind == hf::DecoderStep::kReplace && s.content == " "))
        c_.bpe->set_cut_marker(s.text);
    surfaces_.resize(c_.id_to_token.size());
    for (size_t id = 0; id < surfaces_.size(); ++id)
      surfaces_[id] = hf::token_surface(c_.decoder, c_.id_to_token[id]);
    for (const auto& a : c_.added) surfaces_[a.id] = a.content;
  }

  std::string kind() const override { return "hf"; }
  int64_t vocab_size() const override { return static_cast<int64_t>(c_.id_to_token.size()); }
  int32_t eos_id() const override { return c_.eos_id; }
  int32_t bos_id() const override { return c_.bos_id; }
  bool adds_bos() const override { return c_.adds_bos; }
  std::string serialize() const override { return json_; }
  bool reads_utf8_only() const override { return true; }

  std::string token_bytes(int32_t id) const override {
    check_id(id);
    return surfaces_[id];
  }

  std::string decode(const std::vector<int32_t>& ids) const override {
    std::vector<std::string> tokens;
    tokens.reserve(ids.size());
    for (int32_t id : ids) {
      check_id(id);
      tokens.push_back(c_.id_to_token[id]);
    }
    if (c_.decoder.empty()) {  // HF joins tokens with spaces when there is no decoder
      std::string text;
      for (size_t i = 0; i < tokens.size(); ++i) text += (i ? " " : "") + tokens[i];
      return text;
    }
    return hf::run_decoder(c_.decoder, std::move(tokens));
  }

  std::vector<int32_t> encode(std::string_view text) const override {
    require_utf8(text, "a text given to the tokenizer.json tokenizer");
    std::vector<int32_t> ids;
    Cache cache;
    const auto sections = split_added(raw_, text);
    for (size_t i = 0; i < sections.size(); ++i) {
      const Section& s = sections[i];
      if (s.token) {
        ids.push_back(s.token->id);
      } else if (!s.text.empty()) {
        encode_section(s.text, i == 0, cache, ids);
      }
    }
    return ids;
  }

 private:
  // Ids of the words seen so far in one encode() call: a word's ids are a range of `ids`.
  struct Hash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  struct Cache {
    std::unordered_map<std::string, std::pair<uint32_t, uint32_t>, Hash, std::equal_to<>> words;
    std::vector<int32_t> ids;
  };
  static constexpr size_t kMaxCachedWord = 256;

  void check_id(int32_t id) const {
    RETNET_CHECK(id >= 0 && id < vocab_size(),
                 "token id {} is out of range for a tokenizer.json vocabulary of {}", id,
                 vocab_size());
  }

  void encode_section(std::string_view raw, bool first, Cache& cache,
                      std::vector<int32_t>& ids) const;
  void encode_word(std::string_view word, Cache& cache, std::vector<int32_t>& ids) const;

  std::string json_;
  hf::Config c_;
  AddedMatcher raw_, normalized_;
  std::vector<std::string> surfaces_;
};

void HfTokenizer::encode_section(std::string_view raw, bool first, Cache& cache,
                                 std::vector<int32_t>& ids) const {
  const std::string text = hf::normalize(c_.normalizer, std::string(raw));
  if (text.empty()) return;
  const std::string& marker = c_.bpe->cut_marker();
  const hf::Emit encode = [&](std::string_view word) {
    if (marker.empty()) {
      encode_word(word, cache, ids);
      return;
    }
    size_t begin = 0;
    for (size_t at = word.find(marker, 1); at != std::string_view::npos;
         at = word.find(marker, at + marker.size())) {
      if (at >= marker.size() && word.compare(at - marker.size(), marker.size(), marker) == 0)
        continue;  // inside a run of markers
      encode_word(word.substr(begin, at - begin), cache, ids);
      begin = at;
    }
    encode_word(word.substr(begin), cache, ids);
  };
  for (const Section& s : split_added(normalized_, text)) {
    if (s.token)
      ids.push_back(s.token->id);
    else if (!s.text.empty())
      hf::pre_tokenize(c_.pre_tokenizer, s.text, first, encode);
  }
}

void HfTokenizer::encode_word(std::string_view word, Cache& cache,
                              std::vector<int32_t>& ids) const {
  if (word.size() > kMaxCachedWord) {
    c_.bpe->encode_word(word, ids);
    return;
  }
  auto it = cache.words.find(word);
  if (it == cache.words.end()) {
    const auto start = static_cast<uint32_t>(cache.ids.size());
    c_.bpe->encode_word(word, cache.ids);
    it = cache.words
             .emplace(std::string(word),
                      std::make_pair(start, static_cast<uint32_t>(cache.ids.size()) - start))
             .first;
  }
  const auto [start, count] = it->second;
  ids.insert(ids.end(), cache.ids.begin() + start, cache.ids.begin() + start + count);
}

}  // namespace

std::unique_ptr<Tokenizer> make_hf_tokenizer(const std::string& json_text,
                                             const std::string& origin) {
  return std::make_unique<HfTokenizer>(json_text, origin);
}

}  // namespace retnet
