#pragma once
// Shared by the `retnet bench` subcommands: timing, medians with their spread, the machine's
// description and deterministic token ids.
#include <chrono>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

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

}  // namespace retnet::cli
