#include "retnet/core/thread_policy.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <strings.h>
#include <fstream>
#include <iterator>
#include <mutex>
#include <vector>

namespace retnet {
namespace {

constexpr const char* kBusy =
    "sleep at once, OMP_WAIT_POLICY=passive (engine: other work held the cores at start)";
constexpr const char* kFree =
    "spin, then sleep: OpenMP's default (engine: the cores were free at start)";

std::mutex policy_mutex;
std::string policy_in_effect;  // empty until recorded
bool sleep_at_once = false;    // whether the policy recorded has the threads sleep at once

bool is_set(const char* name) { return std::getenv(name) != nullptr; }

// Whether the environment's variables have libgomp's threads sleep at once: GOMP_SPINCOUNT wins
// (0: no spinning), then OMP_WAIT_POLICY=passive.
bool environment_sleeps() {
  if (const char* count = std::getenv("GOMP_SPINCOUNT")) return std::strtod(count, nullptr) == 0;
  const char* wait = std::getenv("OMP_WAIT_POLICY");
  return wait && strcasecmp(wait, "passive") == 0;
}

// The policy the environment chose, or "" when it chose none.
std::string from_environment() {
  std::string out;
  for (const char* name : {"OMP_WAIT_POLICY", "GOMP_SPINCOUNT"}) {
    if (const char* value = std::getenv(name)) {
      out += out.empty() ? "" : ", ";
      out += std::string(name) + "=" + value;
    }
  }
  return out.empty() ? out : out + " (environment)";
}

// Records the engine's choice left in kThreadPolicyVariable (removing what it set) or, without
// one, the environment's policy, or `otherwise`.
void record(const std::string& otherwise) {
  std::lock_guard<std::mutex> lock(policy_mutex);
  const char* choice = std::getenv(kThreadPolicyVariable);
  const char* wait = std::getenv("OMP_WAIT_POLICY");
  const bool busy = choice && std::strcmp(choice, "busy") == 0 && wait &&
                    std::strcmp(wait, "passive") == 0 && !is_set("GOMP_SPINCOUNT");
  const bool cores_free =
      choice && std::strcmp(choice, "free") == 0 && !wait && !is_set("GOMP_SPINCOUNT");
  sleep_at_once = busy || environment_sleeps();
  if (busy) unsetenv("OMP_WAIT_POLICY");
  if (choice) unsetenv(kThreadPolicyVariable);
  const std::string env = from_environment();
  policy_in_effect = busy ? kBusy : cores_free ? kFree : !env.empty() ? env : otherwise;
}

std::vector<std::string> own_arguments() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  const std::string cmdline((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::string> args;
  for (size_t start = 0; start < cmdline.size();) {
    const size_t end = cmdline.find('\0', start);
    args.push_back(
        cmdline.substr(start, end == std::string::npos ? std::string::npos : end - start));
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return args;
}

// True when some other task was runnable in each sample: one of our threads would share a core.
bool other_work_holds_cores() {
  // The fewest of five samples: a task that runs for a moment (a shell, a timer) is not load.
  int fewest = -1;
  for (int i = 0; i < 5; ++i) {
    if (i > 0) usleep(1000);
    std::ifstream in("/proc/loadavg");
    double averages[3];
    int runnable = 0;
    char slash = 0;
    if (!(in >> averages[0] >> averages[1] >> averages[2] >> runnable >> slash) || slash != '/')
      return false;
    const int others = runnable - 1;  // the caller is runnable while it reads
    fewest = fewest < 0 ? others : std::min(fewest, others);
  }
  return fewest > 0;
}

}  // namespace

void apply_thread_policy() {
  if (is_set(kThreadPolicyVariable) || !from_environment().empty()) {
    record("OpenMP's default");
    return;
  }
  if (!other_work_holds_cores()) {
    record(kFree);
    return;
  }
  std::vector<std::string> args = own_arguments();
  if (!args.empty()) {
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    setenv("OMP_WAIT_POLICY", "passive", 1);
    setenv(kThreadPolicyVariable, "busy", 1);
    std::fflush(nullptr);
    execv("/proc/self/exe", argv.data());
    unsetenv("OMP_WAIT_POLICY");  // exec failed: run with OpenMP's default
    unsetenv(kThreadPolicyVariable);
  }
  record("OpenMP's default (the engine could not restart itself to sleep at once)");
}

void adopt_thread_policy() {
  record("OpenMP's default (OpenMP was loaded before the engine could choose)");
}

bool threads_sleep_at_once() {
  std::lock_guard<std::mutex> lock(policy_mutex);
  return sleep_at_once;
}

std::string thread_policy() {
  std::lock_guard<std::mutex> lock(policy_mutex);
  return policy_in_effect.empty() ? "OpenMP's default (the engine did not choose)"
                                  : policy_in_effect;
}

}  // namespace retnet
