#include "metrics.h"

#include <fmt/format.h>

namespace retnet::server {

std::string Metrics::prometheus_text() const {
  std::string out;
  auto add = [&out](const char* name, const char* type, const char* help, double value) {
    out += fmt::format("# HELP retnet_{0} {1}\n# TYPE retnet_{0} {2}\nretnet_{0} {3}\n", name, help,
                       type, value);
  };
  add("requests_total", "counter", "Generation requests accepted", requests.load());
  add("requests_rejected_total", "counter", "Requests answered with an error", rejected.load());
  add("requests_cancelled_total", "counter", "Streams whose client disconnected", cancelled.load());
  add("prompt_tokens_total", "counter", "Prompt tokens of requests (cached ones included)",
      prompt_tokens.load());
  add("prompt_tokens_prefilled_total", "counter", "Prompt tokens run through the model",
      prefilled_tokens.load());
  add("prefill_passes_total", "counter",
      "Batched prefill passes (each reads segments of one or more prompts)",
      prefill_passes.load());
  add("generated_tokens_total", "counter", "Generated tokens", generated_tokens.load());
  add("prompt_seconds_total", "counter", "Time spent prefilling prompts",
      prompt_microseconds.load() * 1e-6);
  add("generation_seconds_total", "counter", "Time spent in batched decode steps",
      decode_microseconds.load() * 1e-6);
  add("decode_steps_total", "counter", "Batched decode steps", decode_steps.load());
  add("shared_core_steps_total", "counter",
      "Decode steps run on one thread because other work shared the cores",
      shared_core_steps.load());
  add("speculative_checks_total", "counter",
      "Speculative checking passes (a stream's pending token and its drafts in one pass)",
      speculative_checks.load());
  add("speculative_drafted_tokens_total", "counter", "Tokens drafted for speculative checks",
      drafted_tokens.load());
  add("speculative_accepted_tokens_total", "counter", "Drafted tokens kept by speculative checks",
      accepted_tokens.load());
  add("prompt_cache_hits_total", "counter", "Requests that restored a cached prefix",
      cache_hits.load());
  add("prompt_cache_misses_total", "counter", "Requests that found no cached prefix",
      cache_misses.load());
  add("prompt_cache_tokens_saved_total", "counter", "Prompt tokens restored instead of prefilled",
      cache_tokens_saved.load());
  add("prompt_cache_bytes", "gauge", "Bytes held by the prompt cache", cache_bytes.load());
  add("prompt_cache_entries", "gauge", "States held by the prompt cache", cache_entries.load());
  add("prompt_cache_disk_hits_total", "counter",
      "Requests whose cached prefix was read from --cache-dir", cache_disk_hits.load());
  add("prompt_cache_disk_bytes", "gauge", "Bytes of the prompt cache's files in --cache-dir",
      cache_disk_bytes.load());
  add("prompt_cache_disk_entries", "gauge", "States in --cache-dir", cache_disk_entries.load());
  add("slots", "gauge", "Slots (--parallel)", static_cast<double>(slots));
  add("slots_busy", "gauge", "Slots prefilling or generating", busy_slots.load());
  add("queue_depth", "gauge", "Requests waiting for a slot", queue_depth.load());
  add("state_bytes", "gauge", "Bytes of the busy slots' states", state_bytes.load());
  add("state_bytes_copied_total", "counter", "Bytes of sequence states copied",
      state_bytes_copied.load());
  return out;
}

}  // namespace retnet::server
