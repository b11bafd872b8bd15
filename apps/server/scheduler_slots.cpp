// The scheduler's slot endpoints (GET /slots, POST /slots/{id}?action=save|restore|erase): they
// read and copy an idle slot's state from an HTTP thread, under the session's lock.
#include <fmt/format.h>

#include "openai_request.h"
#include "retnet/core/json_parse.h"
#include "retnet/core/read_file.h"
#include "retnet/core/safetensors.h"
#include "scheduler.h"

namespace retnet::server {

nlohmann::json Scheduler::slots_json() {
  std::lock_guard<std::mutex> lock(mutex_);
  nlohmann::json out = nlohmann::json::array();
  for (const Slot& s : slots_) {
    static const char* names[] = {"idle", "waiting", "prefill", "decode"};
    nlohmann::json j = {{"id", s.id}, {"state", names[static_cast<int>(s.phase)]}};
    if (s.phase != Phase::Idle) {
      j["prompt_tokens"] = static_cast<int64_t>(s.job->prompt.size());
      j["prefilled_tokens"] = s.prefilled;
      j["generated_tokens"] = s.generated;
    }
    if (s.phase == Phase::Prefill || s.phase == Phase::Decode) {
      j["position"] = s.position;
      j["state_bytes"] = s.state_bytes;
    }
    j["saved_state"] = s.has_state;
    out.push_back(std::move(j));
  }
  return out;
}

// The slot's sequence is the inference thread's while the slot is busy.
void Scheduler::check_idle_locked(int64_t id) const {
  if (slots_[static_cast<size_t>(id)].phase != Phase::Idle)
    throw HttpError(409,
                    fmt::format("slot {} is busy with a request; try again when it is idle", id),
                    "invalid_request_error", "slot_busy");
}

nlohmann::json Scheduler::save_slot(int64_t id, const std::string& path) {
  RETNET_CHECK(id >= 0 && id < options_.slots, "slot {} does not exist (the server has {})", id,
               options_.slots);
  SavedSequence state;
  nlohmann::json tokens;
  {
    std::lock_guard<std::mutex> session_lock(session_mutex_);
    std::lock_guard<std::mutex> lock(mutex_);
    check_idle_locked(id);
    const Slot& s = slots_[static_cast<size_t>(id)];
    RETNET_CHECK(s.has_state, "slot {} has finished no request yet: nothing to save", id);
    state = session_.snapshot(id);
    tokens = s.last_tokens;
    update_gauges_locked();
  }
  write_state_file(path, model_, session_.model_fingerprint(), state);
  write_file_atomically(path + ".tokens.json", tokens.dump());
  return {{"id_slot", id}, {"n_saved", static_cast<int64_t>(tokens.size())}};
}

nlohmann::json Scheduler::erase_slot(int64_t id) {
  RETNET_CHECK(id >= 0 && id < options_.slots, "slot {} does not exist (the server has {})", id,
               options_.slots);
  std::lock_guard<std::mutex> session_lock(session_mutex_);
  std::lock_guard<std::mutex> lock(mutex_);
  check_idle_locked(id);
  Slot& s = slots_[static_cast<size_t>(id)];
  const auto erased = static_cast<int64_t>(s.last_tokens.size());
  session_.reset_sequence(id);
  s.has_state = false;
  s.last_tokens.clear();
  update_gauges_locked();
  return {{"id_slot", id}, {"n_erased", erased}};
}

nlohmann::json Scheduler::restore_slot(int64_t id, const std::string& path) {
  RETNET_CHECK(id >= 0 && id < options_.slots, "slot {} does not exist (the server has {})", id,
               options_.slots);
  SavedSequence state = read_state_file(path, model_, session_.model_fingerprint());
  const std::string tokens_path = path + ".tokens.json";
  std::vector<int32_t> tokens;
  try {
    tokens = parse_json(read_file(tokens_path, "slot tokens file"),
                        fmt::format("slot tokens file '{}'", tokens_path))
                 .get<std::vector<int32_t>>();
  } catch (const nlohmann::json::exception& e) {
    throw Error(fmt::format("slot tokens file '{}' is not a JSON list of token ids: {}",
                            tokens_path, e.what()));
  }
  RETNET_CHECK(static_cast<int64_t>(tokens.size()) == state.position,
               "slot tokens file '{}' lists {} tokens but the state consumed {}", tokens_path,
               tokens.size(), state.position);
  for (int32_t t : tokens)
    RETNET_CHECK(t >= 0 && t < model_.config().vocab_size,
                 "slot tokens file '{}' holds token {} outside the vocabulary", tokens_path, t);
  std::lock_guard<std::mutex> session_lock(session_mutex_);
  std::lock_guard<std::mutex> lock(mutex_);
  check_idle_locked(id);
  Slot& s = slots_[static_cast<size_t>(id)];
  session_.restore(id, state);  // the slot holds it until its next request (a save writes it)
  s.has_state = true;
  // It serves the next request that starts with its tokens, through the cache.
  if (cache_.capacity_bytes() > 0) cache_.insert(tokens, std::move(state));
  s.last_tokens = std::move(tokens);
  update_gauges_locked();
  return {{"id_slot", id}, {"n_restored", static_cast<int64_t>(s.last_tokens.size())}};
}

}  // namespace retnet::server
