#include "retnet/infer/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "retnet/core/error.h"
#include "retnet/core/rng.h"

namespace retnet {

void SamplingParams::validate() const {
  RETNET_CHECK(std::isfinite(temperature) && temperature >= 0,
               "temperature must be a finite number >= 0, got {}", temperature);
  RETNET_CHECK(top_k >= 0, "top-k must be >= 0 (0: no limit), got {}", top_k);
  RETNET_CHECK(top_p > 0 && top_p <= 1, "top-p must be in (0, 1], got {}", top_p);
  RETNET_CHECK(std::isfinite(repeat_penalty) && repeat_penalty > 0,
               "repeat penalty must be a finite number > 0, got {}", repeat_penalty);
  RETNET_CHECK(repeat_last_n >= 0, "repeat-last-n must be >= 0, got {}", repeat_last_n);
  RETNET_CHECK(std::isfinite(presence_penalty) && std::isfinite(frequency_penalty),
               "presence and frequency penalties must be finite, got {} and {}", presence_penalty,
               frequency_penalty);
  RETNET_CHECK(min_p >= 0 && min_p <= 1, "min-p must be in [0, 1], got {}", min_p);
}

SamplerScratch::SamplerScratch(int64_t vocab)
    : logits(static_cast<size_t>(vocab)),
      order(static_cast<size_t>(vocab)),
      seen(static_cast<size_t>(vocab), -1),
      count(static_cast<size_t>(vocab), 0) {}

namespace {

// The logits with the penalties applied, in scratch.logits.
float* penalised_logits(const float* logits, int64_t vocab, const SamplingParams& params,
                        uint64_t position, const int32_t* recent, int64_t n_recent,
                        SamplerScratch& scratch) {
  RETNET_CHECK(static_cast<int64_t>(scratch.logits.size()) == vocab,
               "sampler scratch is sized for {} tokens, the logits have {}", scratch.logits.size(),
               vocab);
  float* z = scratch.logits.data();
  std::copy(logits, logits + vocab, z);
  for (int64_t i = 0; i < vocab; ++i)
    RETNET_CHECK(!std::isnan(z[i]), "the model produced NaN logits (token {}, position {})", i,
                 position);
  // llama.cpp's penalty: divide positive logits by it, multiply negative ones, once per token;
  // then OpenAI's: presence once, frequency per occurrence in the window.
  const bool additive = params.presence_penalty != 0.0f || params.frequency_penalty != 0.0f;
  if ((params.repeat_penalty != 1.0f || additive) && n_recent > 0) {
    const int32_t stamp = ++scratch.stamp;
    const int64_t first = std::max<int64_t>(0, n_recent - params.repeat_last_n);
    for (int64_t i = first; i < n_recent; ++i) {
      const int32_t t = recent[i];
      if (t < 0 || t >= vocab) continue;
      if (scratch.seen[t] == stamp) {
        ++scratch.count[t];
        continue;
      }
      scratch.seen[t] = stamp;
      scratch.count[t] = 1;
      if (params.repeat_penalty != 1.0f)
        z[t] = z[t] > 0 ? z[t] / params.repeat_penalty : z[t] * params.repeat_penalty;
    }
    for (int64_t i = first; additive && i < n_recent; ++i) {
      const int32_t t = recent[i];
      if (t < 0 || t >= vocab || scratch.count[t] == 0) continue;
      z[t] -= params.presence_penalty + params.frequency_penalty * scratch.count[t];
      scratch.count[t] = 0;  // once per token
    }
  }
  return z;
}

// The candidates a temperature draw chooses among: scratch.order[0..n) with unnormalised
// probabilities weight(i) summing to `kept`.
struct Candidates {
  const float* z;
  const int32_t* order;
  double top, inv_t;
  int64_t n;
  double kept;
  // An infinite top logit (inf - inf is NaN) is the softmax's limit: all the probability on the
  // logits equal to it.
  double weight(int64_t i) const {
    if (std::isinf(top)) return z[order[i]] == top ? 1.0 : 0.0;
    return std::exp((z[order[i]] - top) * inv_t);
  }
};

Candidates candidates(const float* z, int64_t vocab, const SamplingParams& params,
                      SamplerScratch& scratch) {
  // Candidates sorted by logit (ties by id, so the order is deterministic), cut to top-k.
  int32_t* order = scratch.order.data();
  std::iota(order, order + vocab, 0);
  const int64_t k = params.top_k > 0 ? std::min(params.top_k, vocab) : vocab;
  auto by_logit = [z](int32_t a, int32_t b) { return z[a] > z[b] || (z[a] == z[b] && a < b); };
  std::partial_sort(order, order + k, order + vocab, by_logit);
  // Softmax at the temperature over the k candidates (in double: the nucleus sum must be exact
  // enough to be the same on every machine).
  Candidates c{z, order, z[order[0]], 1.0 / params.temperature, k, 0.0};
  double total = 0;
  for (int64_t i = 0; i < k; ++i) total += c.weight(i);
  // Nucleus: the smallest prefix whose probability reaches top_p; min-p: only the candidates at
  // least min_p times as likely as the first.
  if (params.min_p > 0.f)
    for (int64_t i = 1; i < k; ++i)
      if (c.weight(i) < params.min_p * c.weight(0)) {
        c.n = i;
        break;
      }
  if (params.top_p < 1.f) {
    double cum = 0;
    for (int64_t i = 0; i < c.n; ++i) {
      cum += c.weight(i) / total;
      if (cum >= params.top_p) {
        c.n = i + 1;
        break;
      }
    }
  }
  for (int64_t i = 0; i < c.n; ++i) c.kept += c.weight(i);
  return c;
}

}  // namespace

int32_t sample_token(const float* logits, int64_t vocab, const SamplingParams& params,
                     uint64_t stream, uint64_t position, const int32_t* recent, int64_t n_recent,
                     SamplerScratch& scratch) {
  const float* z = penalised_logits(logits, vocab, params, position, recent, n_recent, scratch);
  // Greedy: the first maximum (ties go to the lowest id, as argmax does).
  if (params.temperature == 0.f) return static_cast<int32_t>(std::max_element(z, z + vocab) - z);
  const Candidates c = candidates(z, vocab, params, scratch);
  const double u = Philox(params.seed).uniform(/*stream=*/0x5a3b1e00000000ull + stream, position);
  double target = u * c.kept, cum = 0;
  for (int64_t i = 0; i < c.n; ++i) {
    cum += c.weight(i);
    if (cum >= target) return c.order[i];
  }
  return c.order[c.n - 1];
}

void sampling_distribution(const float* logits, int64_t vocab, const SamplingParams& params,
                           const int32_t* recent, int64_t n_recent, SamplerScratch& scratch,
                           float* probs) {
  const float* z = penalised_logits(logits, vocab, params, 0, recent, n_recent, scratch);
  std::fill(probs, probs + vocab, 0.f);
  if (params.temperature == 0.f) {
    probs[std::max_element(z, z + vocab) - z] = 1.f;
    return;
  }
  const Candidates c = candidates(z, vocab, params, scratch);
  for (int64_t i = 0; i < c.n; ++i) probs[c.order[i]] = static_cast<float>(c.weight(i) / c.kept);
}

}  // namespace retnet
