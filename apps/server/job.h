#pragma once
// One generation request as the inference thread sees it: what to generate (set by an HTTP thread
// before queueing, then read-only) and what came out (appended by the inference thread, taken by
// the HTTP thread that streams or collects it). The output side is guarded by `mutex`.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "retnet/infer/grammar.h"
#include "retnet/retnet.h"

namespace retnet::server {

using Clock = std::chrono::steady_clock;

// Log-probabilities of one generated token under the model's distribution (before sampling's
// temperature and truncation), with the most likely alternatives when asked for.
struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0;
  std::vector<std::pair<int32_t, float>> top;  // most likely first
};

// What one choice of a job has produced, not yet taken by the HTTP thread.
struct ChoiceOutput {
  std::string text;  // released text (whole UTF-8 characters, never a part of a stop string)
  std::vector<TokenLogprob> logprobs;
  bool finished = false;
  std::string finish_reason;  // "stop" or "length" (OpenAI's words), when finished without error
  int64_t completion_tokens = 0;
  // Speculative decoding: checking passes, tokens drafted for them, drafted tokens kept.
  int64_t checks = 0, drafted_tokens = 0, accepted_tokens = 0;
};

struct Job {
  // What to do.
  std::vector<int32_t> prompt;  // never empty
  // Choices (OpenAI's n): the prompt is read once, its state forked into n slots; choice i draws
  // with random stream i.
  int64_t n = 1;
  SamplingParams sampling;
  int64_t max_tokens = 0;
  std::vector<std::string> stop;
  bool stop_at_eos = true;
  int top_logprobs = -1;  // -1: no log-probabilities; else how many alternatives per token
  // Added to the logits before sampling (OpenAI's logit_bias); log-probabilities stay the model's.
  std::vector<std::pair<int32_t, float>> logit_bias;
  std::shared_ptr<const Grammar> grammar;  // structured output: masks every token; null: none
  // Speculative decoding with prompt lookup: match up to `lookup` last tokens (0: off), draft
  // at most `draft_max` tokens per check.
  int64_t lookup = 0, draft_max = 8;
  bool draft_model = false;  // drafts with the server's --draft-model instead (lookup is 0)
  Clock::time_point deadline;
  // Whether the HTTP side takes output as it comes (a stream); otherwise it is woken at the end.
  bool streamed = true;

  // What came out, per choice ([n]).
  std::mutex mutex;
  std::condition_variable changed;
  std::vector<ChoiceOutput> choices = std::vector<ChoiceOutput>(1);
  bool finished = false;      // every choice finished, or the job ended with an error
  std::string error;          // set when the server ended the job (shutdown, timeout)
  int error_status = 0;       // the HTTP status that error maps to
  int64_t prompt_tokens = 0, cached_tokens = 0;
  // For llama-server's timings: when its prompt was taken up and read, and its last token made.
  Clock::time_point prompt_started, prompt_done, last_token;

  // Set by the HTTP side when its client went away: the inference thread frees the slot.
  std::atomic<bool> cancelled{false};
};

}  // namespace retnet::server
