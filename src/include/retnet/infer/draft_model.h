#pragma once
// Drafting with a draft model, shared by `retnet generate --draft-model` (speculative_draft.cpp)
// and the server's --draft-model: a sequence of the draft's own session holds the text before
// the pending token; it samples k tokens ahead, and after the target's check it is brought back
// to the text that was kept.
#include <cstdint>
#include <string>
#include <vector>

#include "retnet/infer/decoder.h"
#include "retnet/infer/session.h"
#include "retnet/model/model_io.h"
#include "retnet/text/tokenizer.h"

namespace retnet {

// An Error unless `draft` drafts the target's tokens: the same vocabulary size and the same
// tokenizer. `draft_name` and `target_name` name them in the message (e.g. "--draft-model 'd'",
// "the model 'm'").
void check_draft_matches(const Model& draft, const Tokenizer& draft_tokenizer,
                         const std::string& draft_name, const Model& target,
                         const Tokenizer& target_tokenizer, const std::string& target_name);

// Loads the draft model at `path` for inference in `precision` (used in place where it can be,
// when `in_place`) and checks that it drafts the target's tokens: the same vocabulary size and
// the same tokenizer as `target` (loaded from `target_path`); an Error naming --draft-model
// otherwise.
Model load_draft_model(const std::string& path, DecodePrecision precision, bool in_place,
                       const Model& target, const Tokenizer& target_tokenizer,
                       const std::string& target_path);

// Feeds `pending` to sequence `seq` of `draft` and samples k >= 1 tokens ahead from the draft's
// own distributions (the decode rule's adjustments and sampling chain, unconstrained; random
// draws keyed by `seed`, `stream` and the position), feeding the first k - 1. On return
// `checked` holds the pending token and the k drafts, `q` their k distributions ([k, vocab]).
// Returns the sequence as it was before, for draft_keep.
SavedSequence draft_ahead(Session& draft, int64_t seq, SequenceDecoder& decoder, int32_t pending,
                          int64_t k, uint64_t seed, uint64_t stream, std::vector<int32_t>& checked,
                          std::vector<float>& q);

// After a check kept the first `accepted` (0..k) of the k drafts in `checked`: the draft's
// sequence, which holds `before`, the pending token and the first k - 1 drafts, is left holding
// `before`, the pending token and the kept drafts (all k kept: the first k - 1; the caller feeds
// the last when it wants the draft level with the target).
void draft_keep(Session& draft, int64_t seq, const SavedSequence& before,
                const std::vector<int32_t>& checked, int64_t accepted);

}  // namespace retnet
