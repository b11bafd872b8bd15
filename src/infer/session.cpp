#include "retnet/infer/session.h"

#include <algorithm>
#include <cstring>
#include <numeric>

#include "retnet/core/arena.h"
#include "retnet/core/core_watch.h"
#include "retnet/core/error.h"
#include "retnet/core/parallel.h"
#include "retnet/core/thread_policy.h"
#include "retnet/infer/state_file.h"
#include "retnet/model/forward.h"
#include "retnet/model/state.h"

namespace retnet {

Session::~Session() = default;

int64_t Session::position(int64_t b) const { return state_->positions.at(b); }

float* Session::state_data(int64_t b) {
  check_index(b);
  settle_check();
  return state_->sequence(b);
}

Session::Session(const Model& model, const SessionOptions& options)
    : model_(model),
      options_(options),
      fingerprint_(model.fingerprint_deferred()
                       ? std::nullopt
                       : std::optional<uint64_t>(retnet::model_fingerprint(model))),
      state_(std::make_unique<State>(model.config(), std::max<int64_t>(options.capacity, 1))),
      arena_(std::make_unique<Arena>()),
      scratch_(model.config().vocab_size) {
  RETNET_CHECK(options.capacity >= 1, "a session holds at least one sequence, got capacity {}",
               options.capacity);
  RETNET_CHECK(options.prefill_block >= 1, "prefill block must be >= 1 token, got {}",
               options.prefill_block);
  RETNET_CHECK(options.history >= 0, "history must be >= 0 tokens, got {}", options.history);
  RETNET_CHECK(options.decode_threads >= 0, "decode threads must be >= 0 (0: automatic), got {}",
               options.decode_threads);
  // Two threads pay off from the default model's size up; below about a million multiply-adds per
  // token one thread wins (docs/design-notes.md#decode-threads).
  decode_threads_ = options.decode_threads > 0             ? options.decode_threads
                    : model.parameter_count() >= (1 << 20) ? num_threads()
                                                           : 1;
  // Sleeping waits hold up beside other work by themselves; spinning ones need the watch.
  if (options.watch_cores && options.decode_threads == 0 && !threads_sleep_at_once())
    watch_ = std::make_unique<CoreWatch>();
  const size_t V = static_cast<size_t>(vocab()), cap = static_cast<size_t>(options.capacity);
  logits_.assign(cap * V, 0.f);
  has_logits_.assign(cap, 0);
  recent_.resize(cap);
  for (auto& r : recent_) r.reserve(static_cast<size_t>(options.history) + 1);
  every_row_.resize(cap);
  std::iota(every_row_.begin(), every_row_.end(), int64_t{0});
  step_rows_.assign(cap, 0);
  step_positions_.assign(cap, 0);
  step_logits_.assign(cap * V, 0.f);
  stepping_.assign(cap, 0);
  pass_lengths_.reserve(cap);
  pass_tokens_.reserve(static_cast<size_t>(options.prefill_block));
  // Size the arena for the larger of a prefill block and a full-batch step, once.
  ForwardOptions prefill;
  prefill.form = model.config().prefill_form();
  prefill.chunk = options.prefill_chunk;
  prefill.last_logits_only = true;
  ForwardOptions step;
  step.form = Form::Recurrent;
  arena_->reserve(
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
  end_check();
  state_->reset(b);
  has_logits_[b] = 0;
  recent_[b].clear();
}

void Session::remove_sequence(int64_t b) {
  check_index(b);
  end_check();
  const int64_t after = active_ - b - 1, V = vocab();
  if (after > 0) {
    for (int64_t i = b + 1; i < active_; ++i) bytes_copied_ += state_->sequence_bytes(i);
    state_->remove(b, active_);
    std::memmove(logits_.data() + b * V, logits_.data() + (b + 1) * V,
                 static_cast<size_t>(after * V) * sizeof(float));
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
  end_check();
  RETNET_CHECK(T >= 0, "prefill of {} tokens", T);
  ForwardOptions fo;
  fo.form = model_.config().prefill_form();
  fo.chunk = options_.prefill_chunk;
  fo.last_logits_only = true;
  float* out = logits_.data() + b * vocab();
  // A short prompt on a small model is a decode-sized job: the same thread rule applies.
  ScopedThreads threads(watched(T * model_.parameter_count() >= (int64_t{1} << 24) ? 0 : decode_threads_));
  for (int64_t start = 0; start < T; start += options_.prefill_block) {
    const int64_t n = std::min(options_.prefill_block, T - start);
    forward_logits(model_, tokens + start, 1, n, out, fo, *arena_, state_->view(b));
    has_logits_[b] = 1;
  }
  for (int64_t i = std::max<int64_t>(0, T - options_.history); i < T; ++i) remember(b, tokens[i]);
}

void Session::prefill(std::span<const int64_t> sequences, std::span<const int32_t* const> tokens,
                      std::span<const int64_t> lengths) {
  const size_t n = sequences.size();
  RETNET_CHECK(tokens.size() == n && lengths.size() == n,
               "batched prefill of {} sequences with {} token lists and {} lengths", n,
               tokens.size(), lengths.size());
  end_check();
  std::fill(stepping_.begin(), stepping_.end(), 0);
  for (size_t i = 0; i < n; ++i) {
    const int64_t b = sequences[i];
    check_index(b);
    RETNET_CHECK(!stepping_[b], "sequence {} is listed twice in one prefill", b);
    stepping_[b] = 1;
    RETNET_CHECK(lengths[i] >= 0, "prefill of {} tokens into sequence {}", lengths[i], b);
  }
  // Passes of whole sequences, at most a block of tokens each; a longer sequence alone.
  int64_t in_pass = 0, pass_tokens = 0;
  pass_lengths_.clear();
  pass_tokens_.clear();
  for (size_t i = 0; i < n; ++i) {
    const int64_t T = lengths[i];
    if (T == 0) continue;
    if (T > options_.prefill_block) {
      prefill(sequences[i], tokens[i], T);
      continue;
    }
    if (pass_tokens + T > options_.prefill_block) {
      prefill_pass(in_pass);
      in_pass = pass_tokens = 0;
      pass_lengths_.clear();
      pass_tokens_.clear();
    }
    step_rows_[in_pass++] = sequences[i];
    pass_lengths_.push_back(T);
    pass_tokens_.insert(pass_tokens_.end(), tokens[i], tokens[i] + T);
    pass_tokens += T;
  }
  if (in_pass > 0) prefill_pass(in_pass);
}

void Session::prefill_pass(int64_t n) {
  if (n == 1) {  // a pass of one sequence is a plain prefill
    prefill(step_rows_[0], pass_tokens_.data(), pass_lengths_[0]);
    return;
  }
  const int64_t V = vocab(), N = static_cast<int64_t>(pass_tokens_.size());
  ForwardOptions fo;
  fo.form = model_.config().prefill_form();
  fo.chunk = options_.prefill_chunk;
  fo.last_logits_only = true;
  for (int64_t i = 0; i < n; ++i) step_positions_[i] = state_->positions[step_rows_[i]];
  StateView view = state_->view();
  view.batch = n;
  view.rows = step_rows_.data();
  view.positions = step_positions_.data();
  view.lengths = pass_lengths_.data();
  ScopedThreads threads(
      watched(N * model_.parameter_count() >= (int64_t{1} << 24) ? 0 : decode_threads_));
  forward_ragged_last_logits(model_, pass_tokens_.data(), n, step_logits_.data(), fo, *arena_,
                             view);
  const int32_t* t = pass_tokens_.data();
  for (int64_t i = 0; i < n; ++i) {
    const int64_t b = step_rows_[i], T = pass_lengths_[i];
    state_->positions[b] = step_positions_[i];
    std::memcpy(logits_.data() + b * V, step_logits_.data() + i * V,
                static_cast<size_t>(V) * sizeof(float));
    has_logits_[b] = 1;
    for (int64_t j = std::max<int64_t>(0, T - options_.history); j < T; ++j) remember(b, t[j]);
    t += T;
  }
}

int Session::watched(int threads) {
  if (!watch_ || !watch_->shared()) return threads;
  shared_core_passes_ += 1;
  return 1;
}

void Session::set_decode_threads(int n) {
  RETNET_CHECK(n >= 1, "decode threads must be >= 1, got {}", n);
  decode_threads_ = n;
}

void Session::step(const int32_t* tokens) {
  RETNET_CHECK(active_ >= 1, "step with no sequence in the session");
  step(std::span<const int64_t>(every_row_.data(), static_cast<size_t>(active_)), tokens);
}

void Session::step(std::span<const int64_t> sequences, const int32_t* tokens) {
  const int64_t n = static_cast<int64_t>(sequences.size()), V = vocab();
  RETNET_CHECK(n >= 1, "step with no sequence");
  end_check();
  std::fill(stepping_.begin(), stepping_.end(), 0);
  bool leading = true;  // the first n sequences in order: the plain step
  for (int64_t i = 0; i < n; ++i) {
    const int64_t b = sequences[static_cast<size_t>(i)];
    check_index(b);
    RETNET_CHECK(!stepping_[b], "sequence {} is listed twice in one step", b);
    stepping_[b] = 1;
    leading &= b == i;
  }
  ScopedThreads threads(watched(decode_threads_));
  ForwardOptions fo;
  fo.form = Form::Recurrent;
  StateView view = state_->view();
  view.batch = n;
  if (leading) {
    forward_logits(model_, tokens, n, 1, logits_.data(), fo, *arena_, view);
  } else {
    // The kernels read and write each state in its own row; positions and logits go through
    // step-ordered buffers.
    for (int64_t i = 0; i < n; ++i) {
      step_rows_[i] = sequences[static_cast<size_t>(i)];
      step_positions_[i] = state_->positions[step_rows_[i]];
    }
    view.rows = step_rows_.data();
    view.positions = step_positions_.data();
    forward_logits(model_, tokens, n, 1, step_logits_.data(), fo, *arena_, view);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t b = step_rows_[i];
      state_->positions[b] = step_positions_[i];
      std::memcpy(logits_.data() + b * V, step_logits_.data() + i * V,
                  static_cast<size_t>(V) * sizeof(float));
    }
  }
  for (int64_t i = 0; i < n; ++i) {
    const int64_t b = sequences[static_cast<size_t>(i)];
    has_logits_[b] = 1;
    remember(b, tokens[i]);
  }
}

const float* Session::logits(int64_t b) const {
  check_index(b);
  RETNET_CHECK(has_logits_[b], "sequence {} has consumed no token yet: no logits to sample from",
               b);
  return logits_.data() + b * vocab();
}

int32_t Session::sample(int64_t b, const SamplingParams& params, uint64_t stream) {
  return sample_logits(b, logits(b), params, stream);
}

int32_t Session::sample_logits(int64_t b, const float* z, const SamplingParams& params,
                               uint64_t stream) {
  check_index(b);
  const auto& r = recent_[b];
  return sample_token(z, vocab(), params, stream, static_cast<uint64_t>(position(b)), r.data(),
                      static_cast<int64_t>(r.size()), scratch_);
}

void Session::distribution(int64_t b, const float* z, const SamplingParams& params, float* probs) {
  check_index(b);
  const auto& r = recent_[b];
  sampling_distribution(z, vocab(), params, r.data(), static_cast<int64_t>(r.size()), scratch_,
                        probs);
}

void Session::fork(int64_t src, int64_t dst) {
  check_index(src);
  check_index(dst);
  if (src == dst) return;
  end_check();
  state_->fork(src, dst);
  bytes_copied_ += state_->sequence_bytes(dst);
  std::memcpy(logits_.data() + dst * vocab(), logits_.data() + src * vocab(),
              static_cast<size_t>(vocab()) * sizeof(float));
  has_logits_[dst] = has_logits_[src];
  recent_[dst] = recent_[src];
}

SavedSequence Session::snapshot(int64_t b) const {
  check_index(b);
  settle_check();
  SavedSequence s;
  s.position = state_->positions[b];
  s.state.resize(static_cast<size_t>(state_->floats_per_sequence));
  s.cache.resize(static_cast<size_t>(state_->cache_floats(b)));
  state_->snapshot(b, s.state.data(), s.cache.data());
  bytes_copied_ += state_->sequence_bytes(b);
  if (has_logits_[b])
    s.logits.assign(logits_.data() + b * vocab(), logits_.data() + (b + 1) * vocab());
  s.recent = recent_[b];
  return s;
}

void Session::restore(int64_t b, const SavedSequence& s) {
  check_index(b);
  const int64_t cache_floats = s.position * state_->cache.floats_per_token;
  RETNET_CHECK(static_cast<int64_t>(s.state.size()) == state_->floats_per_sequence &&
                   static_cast<int64_t>(s.cache.size()) == cache_floats &&
                   (s.logits.empty() || static_cast<int64_t>(s.logits.size()) == vocab()),
               "snapshot of {} state, {} cache and {} logit floats does not fit this model ({}, "
               "{} at position {}, {})",
               s.state.size(), s.cache.size(), s.logits.size(), state_->floats_per_sequence,
               cache_floats, s.position, vocab());
  end_check();
  state_->restore(b, s.state.data(), s.cache.data(), s.position);
  bytes_copied_ += state_->sequence_bytes(b);
  take_logits_and_history(b, s);
}

void Session::take_logits_and_history(int64_t b, const SavedSequence& s) {
  has_logits_[b] = !s.logits.empty();
  if (has_logits_[b])
    std::memcpy(logits_.data() + b * vocab(), s.logits.data(), s.logits.size() * sizeof(float));
  recent_[b].clear();
  const size_t keep = std::min(s.recent.size(), static_cast<size_t>(options_.history));
  recent_[b].insert(recent_[b].end(), s.recent.end() - keep, s.recent.end());
}

void Session::truncate(int64_t b, const SavedSequence& earlier) {
  check_index(b);
  RETNET_CHECK(
      static_cast<int64_t>(earlier.state.size()) == state_->floats_per_sequence &&
          (earlier.logits.empty() || static_cast<int64_t>(earlier.logits.size()) == vocab()),
      "snapshot of {} state and {} logit floats does not fit this model ({}, {})",
      earlier.state.size(), earlier.logits.size(), state_->floats_per_sequence, vocab());
  end_check();
  state_->rewind(b, earlier.state.data(), earlier.position);
  bytes_copied_ += state_->floats_per_sequence * static_cast<int64_t>(sizeof(float));
  take_logits_and_history(b, earlier);
}

void Session::truncate(int64_t b, int64_t position) {
  check_index(b);
  RETNET_CHECK(state_->floats_per_sequence == 0,
               "the {} model has a constant-size state: rolling sequence {} back needs a snapshot "
               "taken at position {}",
               model_.config().mixer_description(), b, position);
  const int64_t dropped = this->position(b) - position;
  end_check();
  state_->rewind(b, nullptr, position);  // checks the position; no constant state to copy
  if (dropped == 0) return;
  has_logits_[b] = 0;
  auto& r = recent_[b];
  r.resize(r.size() - std::min(r.size(), static_cast<size_t>(dropped)));
}

const float* Session::check(int64_t b, const int32_t* tokens, int64_t n) {
  check_index(b);
  RETNET_CHECK(n >= 1, "a check needs at least one token, got {}", n);
  const int64_t V = vocab(), S = state_->floats_per_sequence;
  end_check();
  check_.start = position(b);
  check_.tokens.assign(tokens, tokens + n);
  // Grown, never shrunk: a check longer than the last one must not clear megabytes of states.
  if (check_.logits.size() < static_cast<size_t>(n * V))
    check_.logits.resize(static_cast<size_t>(n * V));
  check_.recent = recent_[b];
  ForwardOptions fo;
  fo.form = model_.config().prefill_form();
  fo.chunk = options_.prefill_chunk;
  arena_->reserve(forward_workspace_floats(model_.config(), 1, n, fo));
  StateView view = state_->view(b);
  if (S > 0) {
    // The state before the check, and (filled by the pass) what each layer consumed: any prefix's
    // state follows from them (settle_check).
    if (!check_.log) check_.log = std::make_unique<CheckLog>();
    CheckLog& log = *check_.log;
    log.tokens = n;
    log.start = check_.start;
    log.start_state.assign(state_->sequence(b), state_->sequence(b) + S);
    const size_t layers = static_cast<size_t>(model_.config().layers);
    log.proj.resize(layers);
    view.check_log = &log;
  }
  ScopedThreads threads(
      watched(n * model_.parameter_count() >= (int64_t{1} << 24) ? 0 : decode_threads_));
  forward_logits(model_, tokens, 1, n, check_.logits.data(), fo, *arena_, view);
  bytes_copied_ += S * static_cast<int64_t>(sizeof(float));
  check_.sequence = b;
  check_.live = n;
  std::memcpy(logits_.data() + b * V, check_.logits.data() + (n - 1) * V,
              static_cast<size_t>(V) * sizeof(float));
  has_logits_[b] = 1;
  for (int64_t i = 0; i < n; ++i) remember(b, tokens[i]);
  return check_.logits.data();
}

void Session::accept(int64_t b, int64_t j) {
  check_index(b);
  const int64_t n = static_cast<int64_t>(check_.tokens.size());
  RETNET_CHECK(check_.sequence == b, "accept on sequence {} needs a check of it just before", b);
  RETNET_CHECK(j >= 0 && j < n, "accept of token {} of a check of {} tokens", j, n);
  if (position(b) == check_.start + j + 1) return;  // the sequence is already there
  const int64_t V = vocab();
  // The constant state is copied when something reads it (settle_check): the decode rule takes
  // the tokens one by one, and only the last prefix's state is needed. The check's cache rows
  // stay in place: a later accept may take more of them again.
  state_->positions[b] = check_.start + j + 1;
  std::memcpy(logits_.data() + b * V, check_.logits.data() + j * V,
              static_cast<size_t>(V) * sizeof(float));
  recent_[b] = check_.recent;
  for (int64_t i = 0; i <= j; ++i) remember(b, check_.tokens[i]);
}

void Session::settle_check() const {
  if (check_.sequence < 0) return;
  const int64_t b = check_.sequence, kept = position(b) - check_.start;
  const int64_t S = state_->floats_per_sequence;
  if (kept == check_.live || S == 0) return;
  arena_->reset();
  arena_->reserve(rewind_workspace_floats(model_, kept));
  rewind_checked_state(model_, *check_.log, kept, state_->sequence(b), *arena_);
  bytes_copied_ += S * static_cast<int64_t>(sizeof(float));
  check_.live = kept;
}

void Session::end_check() {
  settle_check();
  check_.sequence = -1;
}

void Session::save(const std::string& path, int64_t b, const std::string& text_tail) const {
  SavedSequence s = snapshot(b);
  s.text_tail = text_tail;
  write_state_file(path, model_, model_fingerprint(), s);
}

std::string Session::load(const std::string& path, int64_t b) {
  check_index(b);
  const SavedSequence s = read_state_file(path, model_, model_fingerprint());
  restore(b, s);
  return s.text_tail;
}

}  // namespace retnet
