#include "retnet/core/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "retnet/core/error.h"
#include "retnet/core/file_checks.h"

namespace retnet {

MappedFile::~MappedFile() {
  if (data != nullptr) munmap(const_cast<uint8_t*>(data), size);
}

std::shared_ptr<const MappedFile> map_file_readonly(const std::string& path,
                                                    const std::string& what) {
  const int fd = open_regular_file(path, what);
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    throw Error(fmt::format("cannot stat '{}': {}", path, std::strerror(err)));
  }
  auto file = std::make_shared<MappedFile>();
  file->size = static_cast<size_t>(st.st_size);
  if (file->size > 0) {
    void* base = mmap(nullptr, file->size, PROT_READ, MAP_PRIVATE, fd, 0);
    const int err = errno;
    ::close(fd);
    RETNET_CHECK(base != MAP_FAILED, "cannot map '{}': {}", path, std::strerror(err));
    file->data = static_cast<const uint8_t*>(base);
  } else {
    ::close(fd);
  }
  return file;
}

void release_mapped(const uint8_t* data, size_t bytes) {
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t begin = reinterpret_cast<uintptr_t>(data), end = begin + bytes;
  const uintptr_t lo = (begin + page - 1) / page * page, hi = end / page * page;
  if (hi > lo) madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_DONTNEED);
}

}  // namespace retnet
