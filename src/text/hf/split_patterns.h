#pragma once
// Hand-written matchers for the two split regexes of byte-level BPE tokenizers (std::regex has no
// \p{L}). Each gives the same matches as the regex under leftmost-first alternation.
//   GPT-2:   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//   Llama-3: (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
//            ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace retnet::hf {

enum class SplitPattern { kGpt2, kLlama3 };

// The pattern a tokenizer.json regex string is, if it is one of the two above.
std::optional<SplitPattern> recognise_split_pattern(const std::string& regex);

// Length in bytes of the match at `pos` of valid UTF-8 `text` (0: no match there).
size_t match_split_pattern(SplitPattern pattern, std::string_view text, size_t pos);

// Passes `emit` the pieces of `text` in order: each match and each run of text between matches
// (the "Isolated" behaviour); with `drop_matches`, the runs between matches only ("Removed").
void split_by_pattern(SplitPattern pattern, std::string_view text, bool drop_matches,
                      const std::function<void(std::string_view)>& emit);

}  // namespace retnet::hf
