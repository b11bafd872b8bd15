#pragma once
// Internal to src/train: what keeps a run directory (checkpoints, metrics.jsonl, model) the record
// of one run: an exclusive lock for the run's lifetime, no fresh run over an earlier one's files
// unless asked, and a metrics log that a kill -9 leaves whole and a resume leaves gap-free.
#include <cstdint>
#include <string>

#include "retnet/train/trainer.h"

namespace retnet {

// flock on DIR/.lock (DIR created if missing), held until destruction; the kernel drops it when
// the process dies, however it dies. Throws Error naming the directory when another run holds it.
class RunDirectoryLock {
 public:
  explicit RunDirectoryLock(const std::string& dir);
  ~RunDirectoryLock();
  RunDirectoryLock(const RunDirectoryLock&) = delete;
  RunDirectoryLock& operator=(const RunDirectoryLock&) = delete;

 private:
  int fd_ = -1;
};

// Before a fresh run (no resume): refuses a directory that holds an earlier run's checkpoints or
// model, naming it and the options that would take it (spelled as `names`); with overwrite, deletes
// them instead.
void prepare_fresh_run(const std::string& dir, bool overwrite, const RunOptionNames& names);

// metrics.jsonl, one JSON object per line; each line is one write(2) of the whole line, so a
// killed run leaves no torn or missing lines before its last.
class MetricsLog {
 public:
  // A fresh log (truncates), or on resume the existing one cut after the lines of steps <= step
  // (the checkpoint's): later lines will be written again, and a torn last line is dropped.
  MetricsLog(const std::string& path, bool resume, int64_t step);
  ~MetricsLog();
  MetricsLog(const MetricsLog&) = delete;
  MetricsLog& operator=(const MetricsLog&) = delete;
  void append(const std::string& json_object);

 private:
  std::string path_;
  int fd_ = -1;
};

}  // namespace retnet
