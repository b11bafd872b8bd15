#pragma once
// Text generation over a Session: prompts are prefilled (chunkwise), then every unfinished
// sequence decodes one token per step together with the others. Output is released as complete
// UTF-8 characters only, and never the part of the text that could still turn into a stop string.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "retnet/infer/decoder.h"
#include "retnet/infer/session.h"
#include "retnet/text/tokenizer.h"

namespace retnet {

struct Grammar;
class TokenTrie;

// Speculative decoding (speculative.h) of a single sequence: a drafter proposes tokens, one pass
// of the model checks them, and the decode rule keeps those it would have chosen itself, so the
// text is the same as without it.
struct SpeculativeOptions {
  int64_t lookup = 0;     // prompt lookup: match up to this many last tokens (0: off)
  int64_t draft_max = 8;  // most tokens drafted for one check
  // A draft model (not owned; same vocabulary) drafting with its own session, in place of
  // prompt lookup; sampled drafts are kept by the speculative-sampling rule.
  const Model* draft_model = nullptr;
  bool resample_from_p = false;  // tests only: the broken rule (speculative_pick)
  bool enabled() const { return lookup > 0 || draft_model != nullptr; }
  void validate() const;  // throws Error naming the bad value
};

struct GenerateOptions {
  int64_t max_tokens = 128;  // tokens to generate per sequence
  SamplingParams sampling;
  std::vector<std::string> stop;  // stop strings: output ends before the first one
  bool stop_at_eos = true;        // the tokenizer's end-of-sequence token ends a sequence
  bool record_latency = false;    // keep every step's latency (GenerationTimings::steps)
  // Random stream of each sequence (empty: stream 0 for all, so a batched sequence gets the text
  // it gets alone, as the server's requests do).
  std::vector<uint64_t> streams;
  // Called before every decode step; it may throw to end the generation there (a binding checks
  // for Ctrl-C this way).
  std::function<void()> before_step;
  SpeculativeOptions speculative;  // off by default
  // Constrained output (grammar.h, e.g. json_schema_grammar): every sequence's tokens are masked
  // to the grammar, and a sequence ends when its text is complete. Null: free text.
  std::shared_ptr<const Grammar> grammar;
  // The tokenizer's vocabulary as a trie (grammar.h) for the grammar's mask: a caller that
  // generates often keeps one per tokenizer. Null: built for this call (costly on a large
  // vocabulary).
  std::shared_ptr<const TokenTrie> trie;
};

struct SequenceResult {
  std::string text;  // generated text only, valid UTF-8
  int64_t prompt_tokens = 0, generated_tokens = 0;
  std::string finish_reason;  // "length", "stop" or "eos"
  std::vector<int32_t> tokens;  // the generated ids (generated_tokens of them)
  // Bytes of an unfinished UTF-8 character at the end (not in `text`): a state file keeps them
  // so that a continuation completes the character.
  std::string text_tail;
};

struct StepLatency {
  int64_t position;  // of the token fed (sequence 0's)
  int64_t batch;     // sequences in the step
  double seconds;    // the step's forward pass and sampling
};

struct GenerationTimings {
  double prefill_s = 0, decode_s = 0;
  int64_t prefill_tokens = 0, decode_steps = 0, decode_tokens = 0;
  // Speculative decoding: checking passes, tokens drafted for them and drafted tokens kept.
  int64_t checks = 0, drafted_tokens = 0, accepted_tokens = 0;
  std::vector<StepLatency> steps;
};

// Called with newly released text of a sequence (index into the prompts) as it is produced.
using TextCallback = std::function<void(int64_t sequence, std::string_view text)>;

// Generates for session sequences 0..prompts.size()-1 (they must exist; prompts[i] is fed to
// sequence i first and may be empty if the sequence already holds a state). `text_tails[i]`, if
// given, are bytes left over by a previous run (from a state file). A finished sequence leaves
// the batch while others go on; the last one to finish stays in the session (so its state can
// be saved).
std::vector<SequenceResult> generate(Session& session, const Tokenizer& tokenizer,
                                     const std::vector<std::vector<int32_t>>& prompts,
                                     const GenerateOptions& options,
                                     GenerationTimings* timings = nullptr,
                                     const TextCallback& on_text = nullptr,
                                     const std::vector<std::string>& text_tails = {});

}  // namespace retnet
