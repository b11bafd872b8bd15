// The resident-memory probes the statistics and benchmarks print.
#include <gtest/gtest.h>
#include <sys/mman.h>

#include <cstring>

#include "retnet/core/process_memory.h"

namespace retnet {
namespace {

TEST(ProcessMemory, ResettingThePeakForgetsMemoryAlreadyGivenBack) {
  // mmap, not the heap: a sanitizer's allocator keeps freed blocks resident.
  constexpr size_t kBytes = size_t{96} << 20;
  void* p = mmap(nullptr, kBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(p, MAP_FAILED);
  std::memset(p, 1, kBytes);
  const int64_t with = peak_rss_bytes();
  ASSERT_EQ(munmap(p, kBytes), 0);
  const int64_t now = current_rss_bytes();
  EXPECT_GE(with, now + int64_t{64 << 20}) << "the touched 96 MiB counted in the peak";
  if (!reset_peak_rss()) GTEST_SKIP() << "this kernel does not let a process reset its peak";
  EXPECT_LT(peak_rss_bytes(), with - int64_t{64 << 20}) << "the peak is the current size again";
}

}  // namespace
}  // namespace retnet
