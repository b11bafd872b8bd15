// How the server tells shared cores from free ones (core_watch.h): others' CPU time from
// /proc's texts, the verdict's two-sided patience, and the live watch against busy processes.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>
#include <vector>

#include "core_watch.h"

using namespace retnet::server;

namespace {

TEST(ServerCoreWatch, OthersAreTheMachinesBusyTimeLessOurOwn) {
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

TEST(ServerCoreWatch, SharedAfterThreeBusySamplesFreeAfterFiveQuietOnes) {
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

// Busy-looping children on every core: the live watch, sampling every 20 ms (two of /proc/stat's
// ticks), calls the cores shared. (Its return to free needs a quiet machine, which a test suite running beside it
// cannot promise; the verdict's way back is checked above, sample by sample.)
TEST(ServerCoreWatch, SeesBusyProcesses) {
  CoreWatch watch(std::chrono::milliseconds(20));
  std::vector<pid_t> pids;
  const unsigned n = std::max(1u, std::thread::hardware_concurrency());
  for (unsigned i = 0; i < n; ++i) {
    const pid_t pid = fork();
    if (pid == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      volatile unsigned long k = 0;
      for (;;) k = k + 1;
    }
    ASSERT_GT(pid, 0);
    pids.push_back(pid);
  }
  bool shared = false;
  for (int i = 0; i < 2000 && !shared; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    shared = watch.shared();
  }
  for (pid_t pid : pids) kill(pid, SIGKILL);
  for (pid_t pid : pids) waitpid(pid, nullptr, 0);
  EXPECT_TRUE(shared);
}

}  // namespace
