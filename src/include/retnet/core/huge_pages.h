#pragma once
// Transparent huge pages for what decoding streams through once per token (the mapped model file).
#include <cstddef>

namespace retnet {

// Asks the kernel to back [data, data + bytes) with 2 MiB pages where it can (madvise
// MADV_HUGEPAGE): anonymous memory touched afterwards and, on kernels whose page cache keeps large
// folios (ext4 and XFS on Linux 6.x), a mapped file's pages read through this mapping (a file
// already cached in 4 KiB pages stays so until the cache drops it). Batch-1 decoding reads every
// weight once per token, and in a virtual machine each 4 KiB page costs a two-level page walk.
// Only a hint: false where the kernel refuses it (no THP support), and nothing changes then.
bool advise_huge_pages(const void* data, size_t bytes);

}  // namespace retnet
