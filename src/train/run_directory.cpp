#include "run_directory.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "retnet/core/error.h"
#include "retnet/core/file_checks.h"
#include "retnet/core/json_parse.h"
#include "retnet/train/checkpoint.h"

namespace retnet {
namespace {

namespace fs = std::filesystem;

// Bytes of the log's leading lines that are whole JSON objects of steps <= step.
uint64_t kept_metrics_bytes(const std::string& path, int64_t step) {
  std::ifstream in(path, std::ios::binary);
  uint64_t kept = 0;
  std::string line;
  while (std::getline(in, line) && !in.eof()) {  // eof: the last line has no '\n', it is torn
    nlohmann::json j;  // a line that is not JSON ends the kept part, like a torn one
    if (is_valid_json(line)) j = parse_json(line, "log line");
    if (!j.is_object() || !j.contains("step") || !j["step"].is_number_integer() ||
        j["step"].get<int64_t>() > step)
      break;
    kept += line.size() + 1;
  }
  return kept;
}

}  // namespace

RunDirectoryLock::RunDirectoryLock(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  RETNET_CHECK(!ec, "cannot create the run directory '{}': {}", dir, ec.message());
  const std::string path = (fs::path(dir) / ".lock").string();
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  RETNET_CHECK(fd_ >= 0, "cannot open '{}': {}", path, std::strerror(errno));
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    ::close(fd_);
    RETNET_CHECK(err != EWOULDBLOCK,
                 "the run directory '{}' is in use by another `retnet train` run; give another "
                 "--out",
                 dir);
    throw Error(fmt::format("cannot lock '{}': {}", path, std::strerror(err)));
  }
}

RunDirectoryLock::~RunDirectoryLock() { ::close(fd_); }

void prepare_fresh_run(const std::string& dir, bool overwrite, const RunOptionNames& names) {
  std::vector<fs::path> earlier;
  for (const std::string& c : list_checkpoint_files(dir)) earlier.emplace_back(c);
  const fs::path model = fs::path(dir) / "model.safetensors";
  std::error_code ec;
  if (fs::exists(model, ec)) earlier.push_back(model);
  if (ec) throw_file_error("access", model.string(), ec);
  if (earlier.empty()) return;
  RETNET_CHECK(overwrite,
               "the run directory '{}' holds an earlier run ({} and {} more files); continue it "
               "with {}, start over with {} (deletes them), or give another {}",
               dir, earlier.front().filename().string(), earlier.size() - 1, names.resume,
               names.overwrite, names.out);
  for (const fs::path& p : earlier)
    if (!fs::remove(p, ec) && ec) throw_file_error("remove", p.string(), ec);
}

MetricsLog::MetricsLog(const std::string& path, bool resume, int64_t step) : path_(path) {
  check_regular_or_missing(path, "metrics log");
  std::error_code ec;
  if (resume && fs::exists(path, ec)) {
    fs::resize_file(path, kept_metrics_bytes(path, step), ec);
    if (ec) throw_file_error("truncate", path, ec);
  }
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | (resume ? 0 : O_TRUNC),
               0644);
  RETNET_CHECK(fd_ >= 0, "cannot open '{}': {}", path, std::strerror(errno));
}

MetricsLog::~MetricsLog() { ::close(fd_); }

void MetricsLog::append(const std::string& json_object) {
  const std::string line = json_object + "\n";
  size_t done = 0;
  while (done < line.size()) {
    const ssize_t n = ::write(fd_, line.data() + done, line.size() - done);
    if (n < 0 && errno == EINTR) continue;
    RETNET_CHECK(n > 0, "cannot write '{}': {}", path_, std::strerror(errno));
    done += static_cast<size_t>(n);
  }
}

}  // namespace retnet
