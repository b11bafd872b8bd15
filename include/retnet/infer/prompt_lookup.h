#pragma once
// Prompt lookup, a drafter without a model: the text so far (prompt and generated tokens) often
// repeats earlier text (edits, summaries, code, quoted passages), so the tokens that followed the
// latest earlier occurrence of the last few tokens are a likely continuation.
#include <cstdint>
#include <vector>

namespace retnet {

// Up to `max_draft` tokens that followed the latest earlier occurrence of the longest suffix of
// `text` (at most `max_ngram` tokens, at least one) that occurs earlier; empty when no suffix
// does. Appended to `draft` (cleared first).
void prompt_lookup_draft(const std::vector<int32_t>& text, int64_t max_ngram, int64_t max_draft,
                         std::vector<int32_t>& draft);

}  // namespace retnet
