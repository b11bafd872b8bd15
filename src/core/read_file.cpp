#include "retnet/core/read_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "retnet/core/error.h"
#include "retnet/core/file_checks.h"

namespace retnet {

std::string read_file(const std::string& path, const std::string& what) {
  const std::string name =
      what.empty() ? fmt::format("'{}'", path) : fmt::format("{} '{}'", what, path);
  const int fd = open_regular_file(path, what);
  struct stat st {};
  if (::fstat(fd, &st) != 0) st.st_size = 0;
  std::string bytes;
  bytes.reserve(static_cast<size_t>(st.st_size));
  char buffer[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n == 0) break;
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      throw Error(fmt::format("cannot read {}: {}", name, std::strerror(err)));
    }
    bytes.append(buffer, static_cast<size_t>(n));
  }
  ::close(fd);
  return bytes;
}

}  // namespace retnet
