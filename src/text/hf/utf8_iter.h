#pragma once
// Code points of valid UTF-8 (the tokenizer checks its input first).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace retnet::hf {

// The code point at s[i] of valid UTF-8 and its length in bytes.
inline char32_t decode_at(std::string_view s, size_t i, size_t* len) {
  const auto b0 = static_cast<uint8_t>(s[i]);
  if (b0 < 0x80) {
    *len = 1;
    return b0;
  }
  auto cont = [&](size_t k) {
    return static_cast<char32_t>(static_cast<uint8_t>(s[i + k]) & 0x3F);
  };
  if (b0 < 0xE0) {
    *len = 2;
    return (static_cast<char32_t>(b0 & 0x1F) << 6) | cont(1);
  }
  if (b0 < 0xF0) {
    *len = 3;
    return (static_cast<char32_t>(b0 & 0x0F) << 12) | (cont(1) << 6) | cont(2);
  }
  *len = 4;
  return (static_cast<char32_t>(b0 & 0x07) << 18) | (cont(1) << 12) | (cont(2) << 6) | cont(3);
}

// Length in bytes of the character that starts with byte b.
inline size_t char_len(char b) {
  const auto u = static_cast<uint8_t>(b);
  return u < 0x80 ? 1 : u < 0xE0 ? 2 : u < 0xF0 ? 3 : 4;
}

inline void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

}  // namespace retnet::hf
