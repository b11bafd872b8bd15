#include "retnet/core/read_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "retnet/core/error.h"

namespace retnet {

std::string read_file(const std::string& path, const std::string& what) {
  const std::string name =
      what.empty() ? fmt::format("'{}'", path) : fmt::format("{} '{}'", what, path);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  RETNET_CHECK(fd >= 0, "cannot read {}: {}", name, std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || S_ISDIR(st.st_mode)) {
    const int err = errno;
    ::close(fd);
    RETNET_CHECK(!S_ISDIR(st.st_mode), "{} is a directory", name);
    throw Error(fmt::format("cannot read {}: {}", name, std::strerror(err)));
  }
  std::string bytes;
  if (S_ISREG(st.st_mode)) bytes.reserve(static_cast<size_t>(st.st_size));
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
