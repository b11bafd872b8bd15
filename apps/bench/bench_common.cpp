#include "bench_common.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include "retnet/core/cpu_isa.h"
#include "retnet/core/error.h"
#include "retnet/core/gemm.h"
#include "retnet/core/gemm_rowmajor.h"
#include "retnet/core/isa_kernels.h"
#include "retnet/core/quant.h"
#include "retnet/core/rng.h"

extern char** environ;

namespace retnet::cli {

Summary summarize(std::vector<double> v) {
  RETNET_CHECK(!v.empty(), "no measurements to summarize");
  std::sort(v.begin(), v.end());
  return {v[v.size() / 2], v.front(), v.back()};
}

nlohmann::json to_json(const Summary& s) {
  return {{"median", s.median}, {"min", s.min}, {"max", s.max}};
}

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "unknown";
}

std::vector<int32_t> bench_tokens(int64_t n, int64_t vocab, uint64_t salt) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  uint64_t x = 0x9e3779b97f4a7c15ull ^ salt;
  for (auto& v : t) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    v = static_cast<int32_t>(x % static_cast<uint64_t>(vocab));
  }
  return t;
}

void write_json(const std::string& path, const nlohmann::json& j) {
  std::ofstream f(path);
  RETNET_CHECK(f.good(), "cannot write '{}'", path);
  f << j.dump(2) << "\n";
  RETNET_CHECK(f.good(), "error writing '{}'", path);
}

}  // namespace retnet::cli

namespace retnet::cli {

Config family_config(const MixerSpec* kind) {
  Config base;
  Config c;
  c.mixer = kind;
  int64_t best = c.ffn_dim, best_gap = INT64_MAX;
  for (int64_t f = base.ffn_dim / 2; f <= base.ffn_dim * 2; ++f) {
    c.ffn_dim = f;
    const int64_t gap = std::llabs(c.parameter_count() - base.parameter_count());
    if (gap < best_gap) best = f, best_gap = gap;
  }
  c.ffn_dim = best;
  if (kind->preferred_chunk > 0) c.recurrent_chunk_size = kind->preferred_chunk;
  return c;
}

State synthetic_state(const Model& m, int64_t batch, int64_t position, int64_t room) {
  State s(m.config(), batch);
  // One tile of random values, repeated: filling gigabytes of cache value by value would take
  // longer than the measurement.
  constexpr size_t kTile = size_t{1} << 16;
  std::vector<float> tile(kTile);
  Philox rng(11);
  for (size_t i = 0; i < kTile; ++i) tile[i] = static_cast<float>(0.01 * rng.normal(0, i));
  // A decay-attention state: a, b >= 0 with b > 0 (a non-empty state), p = 0.
  bool per_channel = false;
  for (int64_t l = 0; l < m.config().layers; ++l)
    per_channel |= m.config().layer_mixer(l).per_channel;
  if (per_channel)
    for (auto& v : tile) v = std::fabs(v) + 0.01f;
  auto fill = [&](float* p, size_t n, float scale) {
    for (size_t i = 0; i < n; i += kTile) {
      const size_t len = std::min(kTile, n - i);
      for (size_t j = 0; j < len; ++j) p[i + j] = scale * tile[j];
    }
  };
  fill(s.data.data(), s.data.size(), 1.f);
  for (int64_t b = 0; b < batch; ++b) s.positions[b] = position;
  if (!s.cache.empty()) {
    s.cache.reserve(position + room);
    for (int64_t l = 0; l < s.cache.layers; ++l)
      for (int64_t b = 0; b < batch; ++b)
        fill(s.cache.block(l, b), static_cast<size_t>(position * s.cache.row_floats[l]), 30.f);
  }
  return s;
}

nlohmann::json machine_json() {
  nlohmann::json machine = {{"cpu", cpu_model()},
                            {"cores", sysconf(_SC_NPROCESSORS_ONLN)},
                            {"memory_total_bytes", meminfo_bytes("MemTotal")},
                            {"memory_available_bytes_at_start", meminfo_bytes("MemAvailable")},
                            {"isa_cap", isa_name(isa_cap())},
                            {"cpu_isa", isa_name(cpu_isa())},
                            {"kernel_isa", isa_name(kernel_isa())},
                            {"blas_core", blas_info().corename}};
  // <family>_decode_kernel: packed, skinny, rowmajor, quant, ops, mixers.
  for (const auto& [family, kernel] : kernel_choices()) machine[family + "_decode_kernel"] = kernel;
  return machine;
}


std::pair<int, std::string> spawn_capture(const std::vector<std::string>& args,
                                          bool quiet_stderr) {
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  int fds[2];
  if (pipe(fds) != 0) return {-1, ""};
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
  posix_spawn_file_actions_addclose(&fa, fds[0]);
  posix_spawn_file_actions_addclose(&fa, fds[1]);
  if (quiet_stderr) posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  close(fds[1]);
  std::string out;
  if (rc == 0) {
    char buf[4096];
    ssize_t n;
    while ((n = read(fds[0], buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
  }
  close(fds[0]);
  if (rc != 0) return {-1, ""};
  int status = 0;
  waitpid(pid, &status, 0);
  if (WIFSIGNALED(status)) return {128 + WTERMSIG(status), out};
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

namespace {

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

}  // namespace

std::string git_commit() {
#ifdef RETNET_SOURCE_DIR
  auto [rc, head] =
      spawn_capture({"/usr/bin/env", "git", "-C", RETNET_SOURCE_DIR, "rev-parse", "HEAD"}, true);
  if (rc == 0 && trim(head).size() == 40) {
    auto [rc2, st] = spawn_capture(
        {"/usr/bin/env", "git", "-C", RETNET_SOURCE_DIR, "status", "--porcelain", "-uno"}, true);
    return trim(head) + (rc2 == 0 && !trim(st).empty() ? "+dirty" : "");
  }
#endif
#ifdef RETNET_GIT_COMMIT
  if (std::strlen(RETNET_GIT_COMMIT) > 0) return RETNET_GIT_COMMIT;
#endif
  return "unknown";
}

nlohmann::json run_probe(const std::vector<std::string>& args) {
  std::vector<std::string> argv{"/proc/self/exe"};
  argv.insert(argv.end(), args.begin(), args.end());
  auto [rc, out] = spawn_capture(argv, false);
  nlohmann::json last;
  size_t start = 0;
  while (start < out.size()) {
    size_t end = out.find('\n', start);
    if (end == std::string::npos) end = out.size();
    const std::string line = out.substr(start, end - start);
    if (!line.empty() && line.front() == '{') {
      auto j = nlohmann::json::parse(line, nullptr, false);
      if (!j.is_discarded()) last = j;
    }
    start = end + 1;
  }
  if (rc != 0 || last.is_null()) {
    std::string why = rc == 128 + 9 ? "killed (SIGKILL: out of memory?)"
                      : rc > 128   ? "killed by signal " + std::to_string(rc - 128)
                                   : "exited with status " + std::to_string(rc);
    return {{"status", "skipped"}, {"reason", "the measuring process " + why}};
  }
  return last;
}

}  // namespace retnet::cli
