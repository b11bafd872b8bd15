#include "retnet/text/utf8.h"

#include <cstdint>

#include "retnet/core/error.h"

namespace retnet {
namespace {

// Length of the valid character starting at s[i], or 0 if the bytes there are not one;
// *truncated is set when they are a valid start that the text ends before completing.
size_t char_length(std::string_view s, size_t i, bool* truncated) {
  *truncated = false;
  const auto b0 = static_cast<uint8_t>(s[i]);
  if (b0 < 0x80) return 1;
  size_t n;
  uint8_t lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    n = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    n = 3;
    if (b0 == 0xE0) lo = 0xA0;  // overlong
    if (b0 == 0xED) hi = 0x9F;  // surrogates
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    n = 4;
    if (b0 == 0xF0) lo = 0x90;  // overlong
    if (b0 == 0xF4) hi = 0x8F;  // past U+10FFFF
  } else {
    return 0;
  }
  for (size_t k = 1; k < n; ++k) {
    if (i + k >= s.size()) {
      *truncated = true;
      return 0;
    }
    const auto b = static_cast<uint8_t>(s[i + k]);
    if (k == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xBF)) return 0;
  }
  return n;
}

}  // namespace

bool utf8_valid(std::string_view text, size_t* bad_offset) {
  for (size_t i = 0; i < text.size();) {
    bool truncated;
    const size_t n = char_length(text, i, &truncated);
    if (n == 0) {
      if (bad_offset) *bad_offset = i;
      return false;
    }
    i += n;
  }
  return true;
}

void require_utf8(std::string_view text, const std::string& what, size_t base_offset) {
  size_t bad = 0;
  RETNET_CHECK(utf8_valid(text, &bad), "{} is not valid UTF-8 (bad byte 0x{:02x} at offset {})",
               what, static_cast<unsigned char>(text[bad]), base_offset + bad);
}

size_t utf8_complete_prefix(std::string_view bytes) {
  for (size_t i = 0; i < bytes.size();) {
    bool truncated;
    const size_t n = char_length(bytes, i, &truncated);
    if (truncated) return i;
    i += n == 0 ? 1 : n;
  }
  return bytes.size();
}

std::string utf8_sanitize(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  for (size_t i = 0; i < bytes.size();) {
    bool truncated;
    const size_t n = char_length(bytes, i, &truncated);
    if (n == 0) {
      out += "\xEF\xBF\xBD";
      ++i;
    } else {
      out.append(bytes.substr(i, n));
      i += n;
    }
  }
  return out;
}

}  // namespace retnet
