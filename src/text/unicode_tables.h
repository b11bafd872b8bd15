#pragma once
// Unicode classes the tokenizer.json pre-tokenizers need: Letter (\p{L}), Number (\p{N}) and
// White_Space (\s), from the generated table in unicode_tables.cpp.
#include <cstdint>

namespace retnet {

enum UnicodeClass : uint8_t { kLetter = 1, kNumber = 2, kSpace = 4 };

// The classes of a code point past ASCII (binary search in the generated ranges).
uint8_t unicode_classes_slow(char32_t cp);

// The classes of a code point (a bit set of UnicodeClass).
inline uint8_t unicode_classes(char32_t cp) {
  if (cp < 0x80) {
    if ((cp | 0x20) >= 'a' && (cp | 0x20) <= 'z') return kLetter;
    if (cp >= '0' && cp <= '9') return kNumber;
    if (cp == ' ' || (cp >= 0x09 && cp <= 0x0D)) return kSpace;
    return 0;
  }
  return unicode_classes_slow(cp);
}

}  // namespace retnet
