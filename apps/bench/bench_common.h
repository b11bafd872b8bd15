#pragma once
// Shared by the `retnet bench` subcommands: timing, medians with their spread, the machine's
// description and deterministic token ids.
#include <chrono>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "retnet/core/process_memory.h"
#include "retnet/model/config.h"
#include "retnet/model/forward.h"

namespace retnet::cli {

using Clock = std::chrono::steady_clock;

inline double since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

struct Summary {
  double median = 0, min = 0, max = 0;
};
Summary summarize(std::vector<double> v);
nlohmann::json to_json(const Summary& s);

std::string cpu_model();
// Token ids of a deterministic pseudo-text (the benchmarks' speed does not depend on the values).
std::vector<int32_t> bench_tokens(int64_t n, int64_t vocab, uint64_t salt = 0);
// Writes `j` to `path` (Error if it cannot).
void write_json(const std::string& path, const nlohmann::json& j);

// The default config with `kind`, its FFN widened (or narrowed) to the default RetNet's parameter
// count: the mixers without retention's gate projection get back those d x vd parameters per layer.
Config family_config(const MixerSpec* kind);

// The states of `batch` sequences at `position` with room for `room` more tokens, filled with
// small pseudo-random values instead of by a prefill (a step's cost and memory do not depend on
// the values; prefilling 16k tokens into attention costs O(T^2)). The cache's capacity is exactly
// position + room, as a one-shot prefill reserves it.
State synthetic_state(const Model& m, int64_t batch, int64_t position, int64_t room);

// The machine: CPU model, online cores, total memory, BLAS core.
nlohmann::json machine_json();
// peak_rss_bytes(), current_rss_bytes(), meminfo_bytes(): retnet/core/process_memory.h.
// The git commit of the source tree: `git rev-parse HEAD` in the source directory at run time if
// that works ("+dirty" appended when the tree has changes), else the commit CMake saw at configure
// time, else "unknown".
std::string git_commit();

// Runs argv (argv[0] is the program's path; no shell) via posix_spawn and returns its exit status
// (128 + the signal if one killed it, -1 if it could not start) and its stdout.
std::pair<int, std::string> spawn_capture(const std::vector<std::string>& args, bool quiet_stderr);

// Runs this binary again (/proc/self/exe, via posix_spawn: OpenMP is not fork-safe) with `args`
// and returns the JSON object of the last stdout line that parses as one. If the child fails
// (non-zero exit, a signal such as the OOM killer's, no JSON), returns {"status": "skipped",
// "reason": ...}.
nlohmann::json run_probe(const std::vector<std::string>& args);

}  // namespace retnet::cli
