#pragma once
// Server counters and gauges, updated from the HTTP and inference threads, rendered as
// Prometheus text for GET /metrics.
#include <atomic>
#include <cstdint>
#include <string>

namespace retnet::server {

struct Metrics {
  std::atomic<int64_t> requests{0};          // generation requests accepted into the queue
  std::atomic<int64_t> rejected{0};          // answered with a 4xx or 5xx error
  std::atomic<int64_t> cancelled{0};         // clients that went away before their stream ended
  std::atomic<int64_t> prompt_tokens{0};     // prompt tokens of finished prefills (cached included)
  std::atomic<int64_t> prefilled_tokens{0};  // prompt tokens actually run through the model
  std::atomic<int64_t> generated_tokens{0};
  std::atomic<int64_t> prompt_microseconds{0};
  std::atomic<int64_t> prefill_passes{0};  // model passes reading prompts (several in each)
  std::atomic<int64_t> decode_microseconds{0};
  std::atomic<int64_t> decode_steps{0};
  // Decode steps run on the inference thread alone because other work shared the cores.
  std::atomic<int64_t> shared_core_steps{0};
  // Speculative decoding: checking passes, tokens drafted for them, drafted tokens kept.
  std::atomic<int64_t> speculative_checks{0}, drafted_tokens{0}, accepted_tokens{0};
  std::atomic<int64_t> cache_hits{0}, cache_misses{0}, cache_tokens_saved{0};
  std::atomic<int64_t> cache_bytes{0}, cache_entries{0};
  std::atomic<int64_t> cache_disk_hits{0}, cache_disk_bytes{0}, cache_disk_entries{0};
  std::atomic<int64_t> busy_slots{0}, queue_depth{0};
  std::atomic<int64_t> state_bytes{0};  // states of the busy slots
  // Bytes of sequence states copied: into and out of the prompt cache, and for a slot save or
  // restore, and a prompt read once forked into the slots of its other choices (n > 1).
  std::atomic<int64_t> state_bytes_copied{0};
  int64_t slots = 0;                    // set once at start

  std::string prometheus_text() const;
};

}  // namespace retnet::server
