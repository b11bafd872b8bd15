// The engine's OpenMP waiting policy reaches OpenMP in the `retnet` command, and the user's
// OMP_WAIT_POLICY / GOMP_SPINCOUNT win over it. OMP_DISPLAY_ENV=verbose makes OpenMP print what
// it read when it loaded (the restarted process prints last), so the checks see OpenMP's own
// view, not only the engine's report.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "cli_runner.h"
#include "retnet/core/thread_policy.h"

namespace retnet {
namespace {

// Sets (or, with nullopt, removes) environment variables for a scope; the children inherit them.
class ScopedEnv {
 public:
  explicit ScopedEnv(std::vector<std::pair<std::string, std::optional<std::string>>> vars) {
    for (auto& [name, value] : vars) {
      const char* old = std::getenv(name.c_str());
      saved_.push_back({name, old ? std::optional<std::string>(old) : std::nullopt});
      if (value)
        setenv(name.c_str(), value->c_str(), 1);
      else
        unsetenv(name.c_str());
    }
  }
  ~ScopedEnv() {
    for (auto& [name, value] : saved_) {
      if (value)
        setenv(name.c_str(), value->c_str(), 1);
      else
        unsetenv(name.c_str());
    }
  }

 private:
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

// Busy-looping child processes for a scope: other work that holds every core.
class BusyLoops {
 public:
  BusyLoops() {
    const unsigned n = std::max(1u, std::thread::hardware_concurrency());
    for (unsigned i = 0; i < n; ++i) {
      const pid_t pid = fork();
      if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive a test that crashed
        for (volatile unsigned long k = 0;; k = k + 1) {
        }
      }
      if (pid > 0) pids_.push_back(pid);
    }
  }
  ~BusyLoops() {
    for (pid_t pid : pids_) kill(pid, SIGKILL);
    for (pid_t pid : pids_) waitpid(pid, nullptr, 0);
  }

 private:
  std::vector<pid_t> pids_;
};

// OMP_DISPLAY_ENV as the GNU runtime prints it; LLVM's (the sanitizer build) differs.
bool gnu_openmp() { return dlsym(RTLD_DEFAULT, "__kmpc_fork_call") == nullptr; }

// What OpenMP printed for `name` last: the value of the process that ran the command.
std::string last_openmp_setting(const std::string& err, const std::string& name) {
  const std::string key = "  " + name + " = '";
  const size_t at = err.rfind(key);
  if (at == std::string::npos) return "";
  const size_t start = at + key.size();
  return err.substr(start, err.find('\'', start) - start);
}

const std::vector<std::pair<std::string, std::optional<std::string>>> kNoPolicy = {
    {"OMP_WAIT_POLICY", std::nullopt},
    {"GOMP_SPINCOUNT", std::nullopt},
    {kThreadPolicyVariable, std::nullopt},
    {"OMP_DISPLAY_ENV", "verbose"}};

TEST(ThreadPolicy, BesideBusyProcessesTheCommandSleepsAtOnce) {
  ScopedEnv env(kNoPolicy);
  BusyLoops busy;
  const auto r = test::run_retnet("--version", 300);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("OpenMP waits: sleep at once, OMP_WAIT_POLICY=passive (engine"),
            std::string::npos)
      << r.out;
  if (gnu_openmp()) EXPECT_EQ(last_openmp_setting(r.err, "GOMP_SPINCOUNT"), "0") << r.err;
}

// The machine running the tests may be busy or not: either choice must be what OpenMP got.
TEST(ThreadPolicy, TheCommandReportsWhatOpenMpGot) {
  ScopedEnv env(kNoPolicy);
  const auto r = test::run_retnet("--version", 300);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const bool busy = r.out.find("OpenMP waits: sleep at once") != std::string::npos;
  const bool spin = r.out.find("OpenMP waits: spin, then sleep") != std::string::npos;
  ASSERT_TRUE(busy || spin) << r.out;
  if (gnu_openmp())
    EXPECT_EQ(last_openmp_setting(r.err, "GOMP_SPINCOUNT"), busy ? "0" : "300000") << r.err;
}

TEST(ThreadPolicy, TheUsersEnvironmentWins) {
  BusyLoops busy;  // the engine would choose passive: the user's setting must still win
  struct Case {
    const char* wait_policy;  // OMP_WAIT_POLICY, or null
    const char* spin_count;   // GOMP_SPINCOUNT, or null
    const char* reported;     // what --version names
    const char* variable;     // what OpenMP reports it loaded
    const char* loaded;
  };
  for (const Case& c :
       {Case{nullptr, "123", "GOMP_SPINCOUNT=123 (environment)", "GOMP_SPINCOUNT", "123"},
        Case{"active", nullptr, "OMP_WAIT_POLICY=active (environment)", "OMP_WAIT_POLICY",
             "ACTIVE"}}) {
    auto value = [](const char* v) { return v ? std::optional<std::string>(v) : std::nullopt; };
    ScopedEnv env({{"OMP_WAIT_POLICY", value(c.wait_policy)},
                   {"GOMP_SPINCOUNT", value(c.spin_count)},
                   {kThreadPolicyVariable, std::nullopt},
                   {"OMP_DISPLAY_ENV", "verbose"}});
    const auto r = test::run_retnet("--version", 300);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.out.find(std::string("OpenMP waits: ") + c.reported), std::string::npos) << r.out;
    if (gnu_openmp()) EXPECT_EQ(last_openmp_setting(r.err, c.variable), c.loaded) << r.err;
  }
}

}  // namespace
}  // namespace retnet
