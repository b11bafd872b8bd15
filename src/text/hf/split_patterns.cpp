#include "split_patterns.h"

#include "../unicode_tables.h"
#include "utf8_iter.h"

namespace retnet::hf {
namespace {

constexpr const char* kGpt2 =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
constexpr const char* kLlama3 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// A cursor over the code points of a text.
struct Cursor {
  std::string_view text;
  // Classes and length of the character at byte i (0 length at the end).
  uint8_t classes_at(size_t i, size_t* len) const {
    if (i >= text.size()) {
      *len = 0;
      return 0;
    }
    return unicode_classes(decode_at(text, i, len));
  }
  // End of the run of characters from i whose classes satisfy `pred`.
  template <typename Pred>
  size_t run(size_t i, Pred pred, size_t max_chars = SIZE_MAX) const {
    size_t n = 0, len;
    while (n < max_chars && i < text.size() && pred(classes_at(i, &len), i)) {
      i += len;
      ++n;
    }
    return i;
  }
};

bool is_other(uint8_t c) { return (c & (kLetter | kNumber | kSpace)) == 0; }

// 's 't 're 've 'm 'll 'd at pos, ASCII letters case-insensitive when `fold`.
size_t contraction(std::string_view t, size_t pos, bool fold) {
  if (pos + 1 >= t.size() || t[pos] != '\'') return 0;
  auto low = [&](size_t i) -> char {
    if (i >= t.size()) return 0;
    const char c = t[i];
    return fold && c >= 'A' && c <= 'Z' ? static_cast<char>(c + 32) : c;
  };
  const char a = low(pos + 1), b = low(pos + 2);
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
  if ((a == 'r' || a == 'v') && b == 'e') return 3;
  if (a == 'l' && b == 'l') return 3;
  return 0;
}

// \s+(?!\S) then \s+ at pos: the whitespace run, less its last character when a non-space
// follows and the run has more than one character.
size_t whitespace_tail(const Cursor& c, size_t pos) {
  const size_t end = c.run(pos, [](uint8_t k, size_t) { return (k & kSpace) != 0; });
  if (end == pos) return 0;
  if (end == c.text.size()) return end - pos;
  size_t last = end;  // start of the run's last character
  do {
    --last;
  } while ((static_cast<uint8_t>(c.text[last]) & 0xC0) == 0x80);
  return last > pos ? last - pos : end - pos;
}

size_t match_gpt2(const Cursor& c, size_t pos) {
  if (size_t n = contraction(c.text, pos, false)) return n;
  size_t start = pos, len;
  if (c.text[pos] == ' ') ++start;
  const uint8_t k = c.classes_at(start, &len);
  if (len) {
    auto same = [&](uint8_t want) {
      return c.run(start, [want](uint8_t x, size_t) { return (x & want) != 0; }) - pos;
    };
    if (k & kLetter) return same(kLetter);
    if (k & kNumber) return same(kNumber);
    if (is_other(k)) return c.run(start, [](uint8_t x, size_t) { return is_other(x); }) - pos;
  }
  return whitespace_tail(c, pos);
}

bool is_crlf(std::string_view t, size_t i) { return t[i] == '\r' || t[i] == '\n'; }

size_t match_llama3(const Cursor& c, size_t pos) {
  if (size_t n = contraction(c.text, pos, true)) return n;
  const std::string_view t = c.text;
  auto letters = [&](size_t from) {
    return c.run(from, [](uint8_t x, size_t) { return (x & kLetter) != 0; });
  };
  size_t len0, len1;
  const uint8_t k0 = c.classes_at(pos, &len0);
  if (k0 & kLetter) return letters(pos) - pos;
  // [^\r\n\p{L}\p{N}]\p{L}+
  if (!(k0 & kNumber) && !is_crlf(t, pos) && (c.classes_at(pos + len0, &len1) & kLetter))
    return letters(pos + len0) - pos;
  if (k0 & kNumber)
    return c.run(
               pos, [](uint8_t x, size_t) { return (x & kNumber) != 0; }, 3) -
           pos;
  // ` ?[^\s\p{L}\p{N}]+[\r\n]*`
  size_t start = t[pos] == ' ' ? pos + 1 : pos;
  if (is_other(c.classes_at(start, &len1)) && len1) {
    size_t end = c.run(start, [](uint8_t x, size_t) { return is_other(x); });
    while (end < t.size() && is_crlf(t, end)) ++end;
    return end - pos;
  }
  // \s*[\r\n]+: the whitespace run up to its last line break.
  const size_t ws_end = c.run(pos, [](uint8_t x, size_t) { return (x & kSpace) != 0; });
  for (size_t i = ws_end; i > pos; --i)
    if (is_crlf(t, i - 1)) return i - pos;
  return whitespace_tail(c, pos);
}

}  // namespace

std::optional<SplitPattern> recognise_split_pattern(const std::string& regex) {
  if (regex == kGpt2) return SplitPattern::kGpt2;
  if (regex == kLlama3) return SplitPattern::kLlama3;
  return std::nullopt;
}

size_t match_split_pattern(SplitPattern pattern, std::string_view text, size_t pos) {
  const Cursor c{text};
  return pattern == SplitPattern::kGpt2 ? match_gpt2(c, pos) : match_llama3(c, pos);
}

void split_by_pattern(SplitPattern pattern, std::string_view text, bool drop_matches,
                      const std::function<void(std::string_view)>& emit) {
  size_t gap = 0;
  for (size_t pos = 0; pos < text.size();) {
    const size_t n = match_split_pattern(pattern, text, pos);
    if (n == 0) {
      pos += char_len(text[pos]);
      continue;
    }
    if (gap < pos) emit(text.substr(gap, pos - gap));
    if (!drop_matches) emit(text.substr(pos, n));
    pos += n;
    gap = pos;
  }
  if (gap < text.size()) emit(text.substr(gap));
}

}  // namespace retnet::hf
