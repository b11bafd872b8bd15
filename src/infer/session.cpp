#include "retnet/infer/session.h"

#include <algorithm>
#include <cstring>

#include "retnet/core/error.h"
#include "retnet/core/parallel.h"
#include "retnet/infer/state_file.h"

namespace retnet {

Session::Session(const Model& model, const SessionOptions& options)
    : model_(model),
      options_(options),
      fingerprint_(retnet::model_fingerprint(model)),
      state_(model.config(), std::max<int64_t>(options.capacity, 1)),
      scratch_(model.config().vocab_size) {
  RETNET_CHECK(options.capacity >= 1, "a session holds at least one sequence, got capacity {}",
               options.capacity);
  RETNET_CHECK(options.prefill_block >= 1, "prefill block must be >= 1 token, got {}",
               options.prefill_block);
  RETNET_CHECK(options.history >= 0, "history must be >= 0 tokens, got {}", options.history);
  RETNET_CHECK(options.decode_threads >= 0, "decode threads must be >= 0 (0: automatic), got {}",
               options.decode_threads);
  // Measured on the default model (3.8 M parameters, 15 MB per step): two threads decode 1.6x
  // faster than one; below about a million multiply-adds per token one thread wins.
  decode_threads_ = options.decode_threads > 0             ? options.decode_threads
                    : model.parameter_count() >= (1 << 20) ? num_threads()
                                                           : 1;
  const size_t V = static_cast<size_t>(vocab()), cap = static_cast<size_t>(options.capacity);
  logits_.assign(cap * V, 0.f);
  has_logits_.assign(cap, 0);
  recent_.resize(cap);
  for (auto& r : recent_) r.reserve(static_cast<size_t>(options.history) + 1);
  // Size the arena for the larger of a prefill block and a full-batch step, once.
  ForwardOptions prefill;
  prefill.form = model.config().mixer->prefill_form();
  prefill.chunk = options.prefill_chunk;
  prefill.last_logits_only = true;
  ForwardOptions step;
  step.form = Form::Recurrent;
  arena_.reserve(
      std::max(forward_workspace_floats(model.config(), 1, options.prefill_block, prefill),
               forward_workspace_floats(model.config(), options.capacity, 1, step)));
}

void Session::check_index(int64_t b) const {
  RETNET_CHECK(b >= 0 && b < active_, "sequence {} does not exist (the session holds {})", b,
               active_);
}

int64_t Session::add_sequence() {
  RETNET_CHECK(active_ < options_.capacity, "the session is full ({} sequences)",
               options_.capacity);
  const int64_t b = active_++;
  reset_sequence(b);
  return b;
}

void Session::reset_sequence(int64_t b) {
  check_index(b);
  std::fill(state_.sequence(b), state_.sequence(b) + state_.floats_per_sequence, 0.f);
  state_.positions[b] = 0;  // a cache's rows past the position are never read
  has_logits_[b] = 0;
  recent_[b].clear();
}

void Session::remove_sequence(int64_t b) {
  check_index(b);
  const int64_t after = active_ - b - 1, V = vocab();
  if (after > 0) {
    if (state_.floats_per_sequence > 0)  // 0 for the mixers with only a cache
      std::memmove(state_.sequence(b), state_.sequence(b + 1),
                   static_cast<size_t>(after * state_.floats_per_sequence) * sizeof(float));
    for (int64_t i = b; i + 1 < active_; ++i)
      state_.cache.copy_sequence(i + 1, i, state_.positions[i + 1]);
    std::memmove(logits_.data() + b * V, logits_.data() + (b + 1) * V,
                 static_cast<size_t>(after * V) * sizeof(float));
    std::move(state_.positions.begin() + b + 1, state_.positions.begin() + active_,
              state_.positions.begin() + b);
    std::move(has_logits_.begin() + b + 1, has_logits_.begin() + active_, has_logits_.begin() + b);
    // Swapping keeps every vector's reserved storage: no allocation when sequences come and go.
    for (int64_t i = b; i + 1 < active_; ++i) recent_[i].swap(recent_[i + 1]);
  }
  --active_;
}

void Session::remember(int64_t b, int32_t token) {
  if (options_.history == 0) return;
  auto& r = recent_[b];
  if (static_cast<int64_t>(r.size()) == options_.history) r.erase(r.begin());
  r.push_back(token);
}

void Session::prefill(int64_t b, const int32_t* tokens, int64_t T) {
  check_index(b);
  RETNET_CHECK(T >= 0, "prefill of {} tokens", T);
  ForwardOptions fo;
  fo.form = model_.config().mixer->prefill_form();
  fo.chunk = options_.prefill_chunk;
  fo.last_logits_only = true;
  float* out = logits_.data() + b * vocab();
  // A short prompt on a small model is a decode-sized job: the same thread rule applies.
  ScopedThreads threads(T * model_.parameter_count() >= (int64_t{1} << 24) ? 0 : decode_threads_);
  for (int64_t start = 0; start < T; start += options_.prefill_block) {
    const int64_t n = std::min(options_.prefill_block, T - start);
    forward_logits(model_, tokens + start, 1, n, out, fo, arena_, state_.view(b));
    has_logits_[b] = 1;
  }
  for (int64_t i = std::max<int64_t>(0, T - options_.history); i < T; ++i) remember(b, tokens[i]);
}

void Session::step(const int32_t* tokens) {
  RETNET_CHECK(active_ >= 1, "step with no sequence in the session");
  ScopedThreads threads(decode_threads_);
  ForwardOptions fo;
  fo.form = Form::Recurrent;
  StateView view = state_.view();
  view.batch = active_;
  forward_logits(model_, tokens, active_, 1, logits_.data(), fo, arena_, view);
  for (int64_t b = 0; b < active_; ++b) {
    has_logits_[b] = 1;
    remember(b, tokens[b]);
  }
}

const float* Session::logits(int64_t b) const {
  check_index(b);
  RETNET_CHECK(has_logits_[b], "sequence {} has consumed no token yet: no logits to sample from",
               b);
  return logits_.data() + b * vocab();
}

int32_t Session::sample(int64_t b, const SamplingParams& params, uint64_t stream) {
  const float* z = logits(b);
  const auto& r = recent_[b];
  return sample_token(z, vocab(), params, stream, static_cast<uint64_t>(position(b)), r.data(),
                      static_cast<int64_t>(r.size()), scratch_);
}

void Session::save(const std::string& path, int64_t b, const std::string& text_tail) const {
  check_index(b);
  SavedSequence s;
  s.position = state_.positions[b];
  const float* st = state_.sequence(b);
  s.state.assign(st, st + state_.floats_per_sequence);
  if (!state_.cache.empty() && s.position > 0)
    for (int64_t l = 0; l < state_.cache.layers; ++l) {
      const float* rows = const_cast<TokenCache&>(state_.cache).block(l, b);
      s.cache.insert(s.cache.end(), rows, rows + s.position * state_.cache.floats_per_token);
    }
  if (has_logits_[b])
    s.logits.assign(logits_.data() + b * vocab(), logits_.data() + (b + 1) * vocab());
  s.recent = recent_[b];
  s.text_tail = text_tail;
  write_state_file(path, model_, fingerprint_, s);
}

std::string Session::load(const std::string& path, int64_t b) {
  check_index(b);
  SavedSequence s = read_state_file(path, model_, fingerprint_);
  if (!s.state.empty())
    std::memcpy(state_.sequence(b), s.state.data(), s.state.size() * sizeof(float));
  if (!state_.cache.empty() && s.position > 0) {
    state_.cache.reserve(s.position);
    const int64_t per_layer = s.position * state_.cache.floats_per_token;
    for (int64_t l = 0; l < state_.cache.layers; ++l)
      std::memcpy(state_.cache.block(l, b), s.cache.data() + l * per_layer,
                  static_cast<size_t>(per_layer) * sizeof(float));
  }
  state_.positions[b] = s.position;
  has_logits_[b] = !s.logits.empty();
  if (has_logits_[b])
    std::memcpy(logits_.data() + b * vocab(), s.logits.data(), s.logits.size() * 4);
  recent_[b].clear();
  const size_t keep = std::min(s.recent.size(), static_cast<size_t>(options_.history));
  recent_[b].insert(recent_[b].end(), s.recent.end() - keep, s.recent.end());
  return s.text_tail;
}

}  // namespace retnet
