// How the server tells shared cores from free ones (core_watch.h): others' runnable tasks from
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

TEST(ServerCoreWatch, OthersAreTheRunnableTasksLessOurRunningThreads) {
  EXPECT_EQ(runnable_of_others("0.50 1.40 2.13 4/94 17896\n", 1), 3);
  EXPECT_EQ(runnable_of_others("0.50 1.40 2.13 2/94 17896\n", 2), 0);
  EXPECT_EQ(runnable_of_others("0.50 1.40 2.13 1/94 17896\n", 3), 0);  // read at other moments
  EXPECT_EQ(runnable_of_others("", 0), 0);                             // unreadable: free
  EXPECT_EQ(runnable_of_others("0.50 1.40 2.13 7 94", 0), 0);
}

TEST(ServerCoreWatch, ThreadStateFollowsTheLastParenthesis) {
  EXPECT_TRUE(stat_says_running("123 (retnet) R 1 2 3"));
  EXPECT_FALSE(stat_says_running("123 (retnet) S 1 2 3"));
  EXPECT_TRUE(stat_says_running("123 (a) S (b)) R 1"));  // a name with ") S (" in it
  EXPECT_FALSE(stat_says_running("123 (retnet)"));
  EXPECT_FALSE(stat_says_running(""));
}

TEST(ServerCoreWatch, SharedAfterThreeBusySamplesFreeAfterFiveQuietOnes) {
  SharingVerdict v;
  EXPECT_FALSE(v.add(1));
  EXPECT_FALSE(v.add(2));
  EXPECT_FALSE(v.add(0));  // a gap: the count starts again
  EXPECT_FALSE(v.add(1));
  EXPECT_FALSE(v.add(1));
  EXPECT_TRUE(v.add(1));
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(v.add(0)) << i;
  EXPECT_TRUE(v.add(0) == false);
  EXPECT_FALSE(v.shared());
  EXPECT_FALSE(v.add(3));
}

// Busy-looping children on every core: the live watch, sampling every millisecond, calls the
// cores shared. (Its return to free needs a quiet machine, which a test suite running beside it
// cannot promise; the verdict's way back is checked above, sample by sample.)
TEST(ServerCoreWatch, SeesBusyProcesses) {
  CoreWatch watch(std::chrono::milliseconds(1));
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
