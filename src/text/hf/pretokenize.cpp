// Normalizers and pre-tokenizers of tokenizer.json (the subset in components.h).
#include <array>

#include "../unicode_tables.h"
#include "components.h"
#include "utf8_iter.h"

namespace retnet::hf {
namespace {

bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }

// Metaspace: spaces become the replacement, which may be prepended; with `split`, a new word
// starts at each replacement (HF's MergedWithNext).
void metaspace(const PreTokenizerStep& s, std::string_view word, bool first, const Emit& out) {
  std::string text = replace_all(word, " ", s.replacement);
  const bool prepend =
      s.prepend == PreTokenizerStep::kAlways || (s.prepend == PreTokenizerStep::kFirst && first);
  if (prepend && !starts_with(text, s.replacement)) text.insert(0, s.replacement);
  if (!s.split) {
    out(text);
    return;
  }
  const std::string_view t = text;
  size_t begin = 0;
  for (size_t at = t.find(s.replacement, 1); at != std::string_view::npos;
       at = t.find(s.replacement, at + s.replacement.size())) {
    if (at > begin) out(t.substr(begin, at - begin));
    begin = at;
  }
  if (begin < t.size()) out(t.substr(begin));
}

void byte_level(const PreTokenizerStep& s, std::string_view word, const Emit& out) {
  std::string prefixed;
  if (s.add_prefix_space && !starts_with(word, " ")) {
    prefixed = " " + std::string(word);
    word = prefixed;
  }
  std::string mapped;
  auto map = [&out, &mapped](std::string_view piece) {
    mapped.clear();
    for (char c : piece) mapped += byte_to_unicode(static_cast<unsigned char>(c));
    out(mapped);
  };
  if (s.use_regex)
    split_by_pattern(SplitPattern::kGpt2, word, false, map);
  else
    map(word);
}

void split_string(const PreTokenizerStep& s, std::string_view word, const Emit& out) {
  size_t gap = 0;
  if (!s.literal.empty()) {
    for (size_t at = word.find(s.literal); at != std::string_view::npos;
         at = word.find(s.literal, gap)) {
      if (at > gap) out(word.substr(gap, at - gap));
      if (!s.drop_matches) out(word.substr(at, s.literal.size()));
      gap = at + s.literal.size();
    }
  }
  if (gap < word.size()) out(word.substr(gap));
}

// Digits: runs of numeric characters (each digit alone with individual_digits) apart from the
// rest, as HF's char::is_numeric.
void digits(const PreTokenizerStep& s, std::string_view word, const Emit& out) {
  size_t begin = 0;
  int kind = -1;  // of the current run: 1 digits, 0 other
  for (size_t i = 0, len; i < word.size(); i += len) {
    const int k = (unicode_classes(decode_at(word, i, &len)) & kNumber) ? 1 : 0;
    if (i > begin && (k != kind || (k == 1 && s.individual_digits))) {
      out(word.substr(begin, i - begin));
      begin = i;
    }
    kind = k;
  }
  if (begin < word.size()) out(word.substr(begin));
}

// Step k and the steps after it on one word; the first word a step emits keeps `first`.
void run_steps(const std::vector<PreTokenizerStep>& steps, size_t k, std::string_view word,
               bool first, const Emit& emit) {
  if (k == steps.size()) {
    emit(word);
    return;
  }
  bool first_piece = first;
  const Emit next = [&](std::string_view piece) {
    run_steps(steps, k + 1, piece, first_piece, emit);
    first_piece = false;
  };
  const PreTokenizerStep& s = steps[k];
  switch (s.kind) {
    case PreTokenizerStep::kMetaspace:
      metaspace(s, word, first, next);
      break;
    case PreTokenizerStep::kByteLevel:
      byte_level(s, word, next);
      break;
    case PreTokenizerStep::kSplitRegex:
      split_by_pattern(s.pattern, word, s.drop_matches, next);
      break;
    case PreTokenizerStep::kSplitString:
      split_string(s, word, next);
      break;
    case PreTokenizerStep::kDigits:
      digits(s, word, next);
      break;
  }
}

std::array<std::string, 256> make_byte_map() {
  std::array<std::string, 256> map;
  int n = 0;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    append_utf8(map[b], printable ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + n++));
  }
  return map;
}

}  // namespace

std::string replace_all(std::string_view s, std::string_view from, std::string_view to) {
  std::string out;
  out.reserve(s.size());
  size_t begin = 0;
  for (size_t at = s.find(from); !from.empty() && at != std::string_view::npos;
       at = s.find(from, begin)) {
    out.append(s.substr(begin, at - begin)).append(to);
    begin = at + from.size();
  }
  out.append(s.substr(begin));
  return out;
}

const std::string& byte_to_unicode(unsigned char b) {
  static const std::array<std::string, 256> map = make_byte_map();
  return map[b];
}

int unicode_to_byte(char32_t cp) {
  if ((cp >= '!' && cp <= '~') || (cp >= 0xA1 && cp <= 0xAC) || (cp >= 0xAE && cp <= 0xFF))
    return static_cast<int>(cp);
  if (cp < 256 || cp >= 256 + 68) return -1;
  // The n-th byte outside the printable ranges.
  int n = static_cast<int>(cp) - 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    if (!printable && n-- == 0) return b;
  }
  return -1;
}

std::string normalize(const std::vector<NormalizerStep>& steps, std::string text) {
  for (const auto& s : steps) {
    if (s.kind == NormalizerStep::kPrepend) {
      if (!text.empty()) text.insert(0, s.text);
    } else if (s.kind == NormalizerStep::kReplace) {
      text = replace_all(text, s.text, s.content);
    } else {
      text = unicode_normalize(s.kind, text);
    }
  }
  return text;
}

void pre_tokenize(const std::vector<PreTokenizerStep>& steps, std::string_view section,
                  bool first_section, const Emit& emit) {
  run_steps(steps, 0, section, first_section, emit);
}

}  // namespace retnet::hf
