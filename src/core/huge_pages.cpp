#include "retnet/core/huge_pages.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>

namespace retnet {

bool advise_huge_pages(const void* data, size_t bytes) {
#if defined(MADV_HUGEPAGE)
  if (data == nullptr || bytes == 0) return false;
  // madvise takes whole pages: the range is widened to the pages it touches.
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t begin = reinterpret_cast<uintptr_t>(data) / page * page;
  const uintptr_t end = reinterpret_cast<uintptr_t>(data) + bytes;
  return madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE) == 0;
#else
  (void)data;
  (void)bytes;
  return false;
#endif
}

}  // namespace retnet
