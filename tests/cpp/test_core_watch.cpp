// How the engine tells shared cores from free ones (core_watch.h): others' CPU time from
// /proc's texts, the verdict's two-sided patience, and the live watch against busy processes.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>
#include <vector>

#include "retnet/core/core_watch.h"
#include "retnet/infer/session.h"
#include "retnet/model/model.h"

using namespace retnet;

namespace {

TEST(CoreWatch, OthersAreTheMachinesBusyTimeLessOurOwn) {
  EXPECT_EQ(machine_busy_ticks("cpu  10 1 5 1000 7 2 3 4 0 0\ncpu0 5 0 2 500 3 1 1 2 0 0\n"),
            10 + 1 + 5 + 2 + 3);  // idle, iowait and steal left out
  EXPECT_EQ(machine_busy_ticks(""), -1);
  EXPECT_EQ(machine_busy_ticks("cpu0 1 2 3 4 5 6 7 8"), -1);  // not the machine's line
  EXPECT_EQ(machine_busy_ticks("cpu 1 2 3"), -1);
  // utime 14th, stime 15th field; a name with ") S (" in it
  EXPECT_EQ(own_ticks("123 (a) S (b)) R 1 2 3 4 5 6 7 8 9 10 40 2 0 0 20 0 1"), 42);
  EXPECT_EQ(own_ticks("123 (retnet) R 1 2"), -1);
  EXPECT_EQ(own_ticks(""), -1);
  // Over half a second at 100 ticks a second: 80 busy ticks, 30 of them ours: one core's worth.
  EXPECT_DOUBLE_EQ(others_cores({1000, 500}, {1080, 530}, 0.5, 100), 1.0);
  EXPECT_DOUBLE_EQ(others_cores({1000, 500}, {1030, 530}, 0.5, 100), 0.0);  // all ours
  EXPECT_DOUBLE_EQ(others_cores({1000, 500}, {1030, 535}, 0.5, 100), 0.0);  // never below 0
  EXPECT_DOUBLE_EQ(others_cores({-1, 500}, {1030, 530}, 0.5, 100), 0.0);    // unreadable: free
  EXPECT_DOUBLE_EQ(others_cores({1000, 500}, {1080, 530}, 0.0, 100), 0.0);
}

TEST(CoreWatch, SharedAfterThreeBusySamplesFreeAfterFiveQuietOnes) {
  SharingVerdict v;
  EXPECT_FALSE(v.add(true));
  EXPECT_FALSE(v.add(true));
  EXPECT_FALSE(v.add(false));  // a gap: the count starts again
  EXPECT_FALSE(v.add(true));
  EXPECT_FALSE(v.add(true));
  EXPECT_TRUE(v.add(true));
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(v.add(false)) << i;
  EXPECT_FALSE(v.add(false));
  EXPECT_FALSE(v.shared());
  EXPECT_FALSE(v.add(true));
}

// A busy-looping child process on every core, for as long as it lives.
class BusyChildren {
 public:
  BusyChildren() {
    const unsigned n = std::max(1u, std::thread::hardware_concurrency());
    for (unsigned i = 0; i < n; ++i) {
      const pid_t pid = fork();
      if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        volatile unsigned long k = 0;
        for (;;) k = k + 1;
      }
      if (pid > 0) pids_.push_back(pid);
    }
  }
  ~BusyChildren() {
    for (pid_t pid : pids_) kill(pid, SIGKILL);
    for (pid_t pid : pids_) waitpid(pid, nullptr, 0);
  }
  size_t count() const { return pids_.size(); }

 private:
  std::vector<pid_t> pids_;
};

// The live watch, sampling every 20 ms (two of /proc/stat's ticks), calls the cores shared
// beside busy children. (Its return to free needs a quiet machine, which a test suite running
// beside it cannot promise; the verdict's way back is checked above, sample by sample.)
TEST(CoreWatch, SeesBusyProcesses) {
  CoreWatch watch(std::chrono::milliseconds(20));
  BusyChildren busy;
  ASSERT_GT(busy.count(), 0u);
  bool shared = false;
  for (int i = 0; i < 2000 && !shared; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    shared = watch.shared();
  }
  EXPECT_TRUE(shared);
}

// A session with automatic threads watches the cores (its waits spin: this test binary chose no
// policy) and takes its passes on one thread beside busy children; one told not to never does.
TEST(CoreWatch, ASessionStepsOnOneThreadWhileTheCoresAreShared) {
  Config c;
  c.embed_dim = 32, c.value_embed_dim = 48, c.ffn_dim = 40, c.layers = 2;
  const Model m = Model::init(c, 1);
  SessionOptions unwatched;
  unwatched.watch_cores = false;
  Session watching(m), blind(m, unwatched);
  const std::vector<int32_t> prompt = {1, 2, 3};
  for (Session* s : {&watching, &blind}) {
    s->add_sequence();
    s->prefill(0, prompt.data(), 3);
  }
  BusyChildren busy;
  ASSERT_GT(busy.count(), 0u);
  // Three busy samples 100 ms apart call the cores shared: give it up to 10 s of steps.
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  int32_t token = 4;
  while (watching.shared_core_passes() == 0 && std::chrono::steady_clock::now() < until) {
    watching.step(&token);
    blind.step(&token);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_GT(watching.shared_core_passes(), 0);
  EXPECT_EQ(blind.shared_core_passes(), 0);
}

}  // namespace
