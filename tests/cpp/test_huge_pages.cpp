// Huge pages for what decoding streams (retnet/core/huge_pages.h): the helper marks a range for
// transparent huge pages, and a mapped model file is marked so, as /proc/self/smaps shows ("hg"
// among a mapping's VmFlags). Whether the kernel then has 2 MiB pages to give depends on the
// machine's memory and page cache, so the tests check the request, not the pages.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "retnet/core/huge_pages.h"
#include "retnet/core/safetensors.h"

namespace retnet {
namespace {

// The VmFlags of the mapping of this process that holds `p` ("" if none does).
std::string vm_flags_at(const void* p) {
  std::ifstream smaps("/proc/self/smaps");
  const auto address = reinterpret_cast<uintptr_t>(p);
  std::string line;
  bool inside = false;
  while (std::getline(smaps, line)) {
    uintptr_t begin = 0, end = 0;
    char dash = 0;
    std::istringstream header(line);
    if (header >> std::hex >> begin >> dash >> end && dash == '-') {
      inside = begin <= address && address < end;
      continue;
    }
    if (inside && line.rfind("VmFlags:", 0) == 0) return line.substr(8) + " ";
  }
  return "";
}

bool kernel_has_thp() { return std::filesystem::exists("/sys/kernel/mm/transparent_hugepage"); }

TEST(HugePages, AnEmptyRangeIsRefused) {
  EXPECT_FALSE(advise_huge_pages(nullptr, 4096));
  int x = 0;
  EXPECT_FALSE(advise_huge_pages(&x, 0));
}

TEST(HugePages, AnAnonymousRangeIsMarkedAndStaysUsable) {
  if (!kernel_has_thp()) GTEST_SKIP() << "this kernel has no transparent huge pages";
  constexpr size_t kBytes = size_t{8} << 20;
  void* p = mmap(nullptr, kBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(p, MAP_FAILED);
  auto* bytes = static_cast<uint8_t*>(p);
  EXPECT_EQ(vm_flags_at(bytes + 4096).find(" hg "), std::string::npos) << "not marked before";
  // An address inside a page: the helper widens the range to whole pages.
  ASSERT_TRUE(advise_huge_pages(bytes + 100, kBytes - 100));
  EXPECT_NE(vm_flags_at(bytes + 4096).find(" hg "), std::string::npos) << vm_flags_at(bytes);
  for (size_t i = 0; i < kBytes; i += 4096) bytes[i] = static_cast<uint8_t>(i >> 12);
  for (size_t i = 0; i < kBytes; i += 4096) ASSERT_EQ(bytes[i], static_cast<uint8_t>(i >> 12));
  ASSERT_EQ(munmap(p, kBytes), 0);
}

TEST(HugePages, AMappedModelFileAsksForThem) {
  if (!kernel_has_thp()) GTEST_SKIP() << "this kernel has no transparent huge pages";
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("retnet_huge_pages_" + std::to_string(getpid()) + ".safetensors"))
                               .string();
  const std::vector<float> values(1 << 16, 0.5f);
  write_safetensors(path, {{"w", {256, 256}, values.data()}}, {});
  {
    const SafetensorsFile file = SafetensorsFile::open(path);
    const SafetensorsTensor* w = file.find("w");
    ASSERT_NE(w, nullptr);
    EXPECT_NE(vm_flags_at(w->data).find(" hg "), std::string::npos) << vm_flags_at(w->data);
    const float* f = reinterpret_cast<const float*>(w->data);
    EXPECT_EQ(f[0], 0.5f);
    EXPECT_EQ(f[values.size() - 1], 0.5f);
  }
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace retnet
