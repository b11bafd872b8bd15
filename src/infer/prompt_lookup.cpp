#include "retnet/infer/prompt_lookup.h"

#include <algorithm>

namespace retnet {

void prompt_lookup_draft(const std::vector<int32_t>& text, int64_t max_ngram, int64_t max_draft,
                         std::vector<int32_t>& draft) {
  draft.clear();
  const int64_t L = static_cast<int64_t>(text.size());
  if (max_draft <= 0) return;
  for (int64_t n = std::min(max_ngram, L - 1); n >= 1; --n) {
    const int32_t* suffix = text.data() + L - n;
    // The latest earlier occurrence: it ends before the suffix's own last token.
    for (int64_t start = L - n - 1; start >= 0; --start) {
      if (!std::equal(suffix, suffix + n, text.data() + start)) continue;
      const int64_t from = start + n, count = std::min(max_draft, L - from);
      draft.assign(text.begin() + from, text.begin() + from + count);
      return;
    }
  }
}

}  // namespace retnet
