#include "retnet/core/file_checks.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "retnet/core/error.h"

namespace retnet {
namespace {

std::string describe(const std::string& path, const std::string& what) {
  return what.empty() ? fmt::format("'{}'", path) : fmt::format("{} '{}'", what, path);
}

void check_regular(const struct stat& st, const std::string& path, const std::string& what) {
  RETNET_CHECK(S_ISREG(st.st_mode), "{} is {}, not a regular file", describe(path, what),
               file_type_name(st.st_mode));
}

}  // namespace

std::string file_type_name(unsigned mode) {
  if (S_ISREG(mode)) return "a regular file";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISLNK(mode)) return "a symbolic link";
  return "a special file";
}

int open_regular_file(const std::string& path, const std::string& what) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    throw_file_error(fmt::format("read {}", what.empty() ? std::string("file") : what), path,
                     std::error_code(errno, std::generic_category()));
  check_regular(st, path, what);
  // O_NONBLOCK: a FIFO swapped in after the stat() cannot block the open; fstat() then decides.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0)
    throw_file_error(fmt::format("read {}", what.empty() ? std::string("file") : what), path,
                     std::error_code(errno, std::generic_category()));
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    const int err = errno;
    ::close(fd);
    if (!S_ISREG(st.st_mode)) check_regular(st, path, what);
    throw_file_error("stat", path, std::error_code(err, std::generic_category()));
  }
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags >= 0) ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  return fd;
}

void check_regular_or_missing(const std::string& path, const std::string& what) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return;
  check_regular(st, path, what);
}

bool same_file(const std::string& a, const std::string& b) {
  struct stat sa {
  }, sb{};
  if (::stat(a.c_str(), &sa) == 0 && ::stat(b.c_str(), &sb) == 0)
    return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
  std::error_code ea, eb;
  const auto ca = std::filesystem::weakly_canonical(a, ea);
  const auto cb = std::filesystem::weakly_canonical(b, eb);
  if (ea || eb) return std::filesystem::absolute(a, ea) == std::filesystem::absolute(b, eb);
  return ca == cb;
}

void check_not_same_file(const std::string& output, const std::string& output_what,
                         const std::string& input, const std::string& input_what) {
  RETNET_CHECK(!same_file(output, input),
               "{} '{}' is the same file as the {} '{}'; writing it would destroy the input; give "
               "another output path",
               output_what, output, input_what, input);
}

void throw_file_error(const std::string& action, const std::string& path,
                      const std::error_code& ec) {
  throw Error(fmt::format("cannot {} '{}': {}", action, path, ec.message()));
}

}  // namespace retnet
