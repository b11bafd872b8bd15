#pragma once
// `retnet bench speculative --benefit`: what speculative decoding gains on trained models.
#include <cstdint>
#include <string>
#include <vector>

namespace retnet::cli {

struct SpeculativeBenefitOptions {
  std::vector<std::string> targets;  // models decoded plainly and speculatively, each in turn
  std::string draft;                 // the draft model (empty: prompt lookup only)
  std::string data = "data/tinyshakespeare.txt";  // prompts come from its last 10%
  std::string dtype = "f32", json, backend = "cpu";
  int64_t prompts = 4;         // prompts of each kind
  int64_t prompt_bytes = 384;  // bytes of a plain prompt, and of a copy-heavy prompt's passage
  int64_t tokens = 128;        // tokens generated per prompt
  int64_t lookup = 3, draft_max = 8;
  float temperature = 0;  // 0: greedy, where every mode must give plain decoding's text
  uint64_t seed = 1;
  int reps = 3, threads = 0;
};

// The prompt set: plain continuation (a stretch of the validation split) and copy-heavy (a
// passage, a lead-in asking for it again, and its start restated with small changes).
struct BenefitPrompt {
  std::string kind;  // "plain" or "copy"
  std::string text;
};
std::vector<BenefitPrompt> benefit_prompts(const std::string& corpus, int64_t per_kind,
                                           int64_t prompt_bytes);

void run_bench_speculative_benefit(const SpeculativeBenefitOptions& o);

}  // namespace retnet::cli
