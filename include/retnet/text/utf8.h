#pragma once
// UTF-8 checks for prompts and streamed output: generated tokens may end inside a multi-byte
// character, and a model can emit byte sequences that are not UTF-8 at all.
#include <cstddef>
#include <string>
#include <string_view>

namespace retnet {

// True if `text` is valid UTF-8 (no overlongs, surrogates or code points past U+10FFFF); else
// false with the offset of the first bad byte in *bad_offset.
bool utf8_valid(std::string_view text, size_t* bad_offset = nullptr);

// Throws Error unless `text` is valid UTF-8: "<what> is not valid UTF-8 (bad byte 0xff at offset
// N)", N counted from `base_offset` (where `text` starts in the file it came from).
void require_utf8(std::string_view text, const std::string& what, size_t base_offset = 0);

// Length of the longest prefix of `bytes` that does not end inside a character that more bytes
// could still complete. Invalid bytes count as complete (they will not become valid later).
size_t utf8_complete_prefix(std::string_view bytes);

// `bytes` with every invalid sequence replaced by U+FFFD, so that the result is valid UTF-8.
std::string utf8_sanitize(std::string_view bytes);

}  // namespace retnet
