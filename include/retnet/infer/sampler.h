#pragma once
// Choosing the next token from logits: greedy, or temperature sampling restricted by top-k, top-p
// (nucleus) and min-p, with llama.cpp's repetition penalty and OpenAI's presence and frequency
// penalties. Random draws come from a counter-based
// RNG keyed by (seed, sequence, position), so a seed gives the same text whatever the thread
// count, the batch a sequence decodes in, or whether it was resumed from a saved state.
#include <cstdint>
#include <vector>

namespace retnet {

struct SamplingParams {
  float temperature = 0.8f;     // 0: greedy (argmax)
  int64_t top_k = 40;           // 0: no limit
  float top_p = 0.95f;          // 1: no limit
  float repeat_penalty = 1.0f;  // 1: off; > 1 makes recent tokens less likely
  int64_t repeat_last_n = 64;   // how many recent tokens the penalties look at
  // Subtracted from a recent token's logit: once if it occurs, and per occurrence (OpenAI's
  // presence_penalty and frequency_penalty; 0: off).
  float presence_penalty = 0.0f, frequency_penalty = 0.0f;
  float min_p = 0.0f;  // drop tokens less likely than min_p x the likeliest one (0: off)
  uint64_t seed = 0;
  void validate() const;  // throws Error naming the bad value
};

// Scratch for sample_token, sized once for a vocabulary (no allocation per call).
class SamplerScratch {
 public:
  explicit SamplerScratch(int64_t vocab);
  std::vector<float> logits;
  std::vector<int32_t> order;
  std::vector<int32_t> seen;   // penalty: stamp of the last call that saw each token
  std::vector<int32_t> count;  // frequency penalty: occurrences in this call's window
  int32_t stamp = 0;
};

// The next token for sequence `stream` at absolute position `position` (the draw's counter).
// `recent` holds the sequence's latest tokens (for the repetition penalty).
int32_t sample_token(const float* logits, int64_t vocab, const SamplingParams& params,
                     uint64_t stream, uint64_t position, const int32_t* recent, int64_t n_recent,
                     SamplerScratch& scratch);

// The distribution sample_token draws from ([vocab], summing to 1): the same penalties and cuts;
// greedy puts all of it on the token sample_token picks.
void sampling_distribution(const float* logits, int64_t vocab, const SamplingParams& params,
                           const int32_t* recent, int64_t n_recent, SamplerScratch& scratch,
                           float* probs);

}  // namespace retnet
