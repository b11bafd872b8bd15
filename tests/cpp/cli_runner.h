#pragma once
// Runs the `retnet` binary for end-to-end tests: exit status, stdout, stderr, and whether a
// signal killed it (a crash is never an acceptable way to reject bad input).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "sanitizer.h"

namespace retnet::test {

struct CliResult {
  int exit_code = -1;
  bool signaled = false;
  std::string out, err;
};

// A limit on a child process only turns a hang into a failure; it must never fail a slow but
// working run. So every limit is at least five minutes, three times that in a sanitizer build
// (instrumented children on a busy 2-core machine ran past two minutes).
inline int hang_guard_seconds(int requested_s) {
  constexpr int kScale = kAddressSanitizer ? 3 : 1;
  return std::max(requested_s, 300) * kScale;
}

// timeout_s > 0: killed (and failing) when it runs longer than hang_guard_seconds(timeout_s).
inline CliResult run_retnet(const std::string& args, int timeout_s = 0) {
  namespace fs = std::filesystem;
  if (timeout_s > 0) timeout_s = hang_guard_seconds(timeout_s);
  static int counter = 0;
  fs::path errf = fs::temp_directory_path() /
                  ("retnet_run_err_" + std::to_string(getpid()) + "_" + std::to_string(counter++));
  const std::string limit =
      timeout_s > 0 ? "timeout -s KILL " + std::to_string(timeout_s) + " " : std::string();
  std::string cmd = limit + std::string(RETNET_CLI) + " " + args + " 2>" + errf.string();
  CliResult r;
  FILE* p = popen(cmd.c_str(), "r");
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  int status = pclose(p);
  r.signaled = WIFSIGNALED(status);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream in(errf);
  r.err.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  fs::remove(errf);
  return r;
}

// Bad input as users must see it: a non-zero exit, no signal, a "retnet: error:" message.
inline ::testing::AssertionResult fails_cleanly(const CliResult& r,
                                                const std::string& expected = "") {
  if (r.signaled) return ::testing::AssertionFailure() << "killed by a signal; stderr: " << r.err;
  if (r.exit_code == 0) return ::testing::AssertionFailure() << "exit 0; stdout: " << r.out;
  if (r.err.find("retnet: error:") == std::string::npos)
    return ::testing::AssertionFailure() << "no 'retnet: error:' on stderr: " << r.err;
  if (!expected.empty() && r.err.find(expected) == std::string::npos)
    return ::testing::AssertionFailure() << "stderr lacks '" << expected << "': " << r.err;
  return ::testing::AssertionSuccess();
}

}  // namespace retnet::test
