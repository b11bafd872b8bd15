#pragma once
// The parts of a tokenizer.json this engine runs, as parsed by config.cpp: normalizer steps,
// pre-tokenizer steps and decoder steps (Sequences are flattened).
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "split_patterns.h"

namespace retnet::hf {

struct NormalizerStep {
  enum Kind { kPrepend, kReplace, kNfc, kNfd, kNfkc, kNfkd } kind;
  std::string text;     // Prepend: what to put in front; Replace: the string to replace
  std::string content;  // Replace: what replaces it
};

// A UTF-8 text in one of Unicode's normalization forms (kind kNfc, kNfd, kNfkc or kNfkd), by ICU.
std::string unicode_normalize(NormalizerStep::Kind form, std::string_view text);

struct PreTokenizerStep {
  enum Kind { kMetaspace, kByteLevel, kSplitRegex, kSplitString, kDigits } kind;
  enum Prepend { kAlways, kFirst, kNever };
  std::string replacement = "\xE2\x96\x81";    // Metaspace
  Prepend prepend = kAlways;                   // Metaspace
  bool split = true;                           // Metaspace: split before each replacement
  bool add_prefix_space = false;               // ByteLevel
  bool use_regex = true;                       // ByteLevel: the GPT-2 split first
  SplitPattern pattern = SplitPattern::kGpt2;  // Split with a Regex
  std::string literal;                         // Split with a String
  bool drop_matches = false;                   // Split: "Removed" rather than "Isolated"
  bool individual_digits = false;              // Digits
};

struct DecoderStep {
  enum Kind { kReplace, kByteFallback, kFuse, kStrip, kMetaspace, kByteLevel } kind;
  std::string text;         // Replace: pattern; Strip: the character; Metaspace: replacement
  std::string content;      // Replace: what replaces it
  int start = 0, stop = 0;  // Strip
  bool strip_first = true;  // Metaspace: drop the first token's leading space
};

// Applies the normalizer steps to a text.
std::string normalize(const std::vector<NormalizerStep>& steps, std::string text);

using Emit = std::function<void(std::string_view)>;

// Passes `emit` the words of one section of text (the text between added tokens), one at a time
// (a whole corpus is never held as words); `first_section` is true for the text at the start of
// the input (Metaspace's prepend_scheme "first").
void pre_tokenize(const std::vector<PreTokenizerStep>& steps, std::string_view section,
                  bool first_section, const Emit& emit);

// The byte-level alphabet: byte b as the character GPT-2 shows it (UTF-8), and back.
const std::string& byte_to_unicode(unsigned char b);
// The byte a byte-level character stands for, or -1.
int unicode_to_byte(char32_t cp);

// HF's decode of token strings through the decoder steps, joined.
std::string run_decoder(const std::vector<DecoderStep>& steps, std::vector<std::string> tokens);

// Every occurrence of `from` in `s` replaced by `to`.
std::string replace_all(std::string_view s, std::string_view from, std::string_view to);

}  // namespace retnet::hf

namespace retnet::hf {

// The exact bytes one token stands for mid-text (for streaming): the decoder's replacements and
// byte mappings without its first-token strip or joins; byte-level characters back to raw bytes.
std::string token_surface(const std::vector<DecoderStep>& steps, const std::string& token);

}  // namespace retnet::hf
