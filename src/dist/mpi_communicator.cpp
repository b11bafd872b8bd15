// The MPI communicator (built when CMake finds MPI: RETNET_MPI=ON). Errors return instead of
// aborting (MPI_ERRORS_RETURN) and become retnet::Error; a watchdog thread ends the job when a
// collective waits longer than the timeout, which is how a hung rank is noticed (a dead one is
// noticed by mpirun, which then ends the others).
#include <mpi.h>

#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <thread>
#include <vector>

#include "mpi_backend.h"
#include "retnet/core/error.h"

namespace retnet {
namespace {

using Clock = std::chrono::steady_clock;

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator() {
    int provided = 0;
    // Only the main thread calls MPI; the watchdog calls MPI_Abort alone, as a last resort.
    MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    watchdog_ = std::thread([this] { watch(); });
  }
  ~MpiCommunicator() override {
    {
      // Finalising waits for the other ranks too: watched like a collective.
      Waiting w(*this, "MPI_Finalize");
      MPI_Finalize();
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    watchdog_.join();
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "mpi"; }

  void all_reduce_sum(float* data, size_t n) override { reduce(data, n, MPI_FLOAT, 4); }
  void all_reduce_sum(double* data, size_t n) override { reduce(data, n, MPI_DOUBLE, 8); }

  void start_all_reduce_sum(float* data, size_t n) override {
    for (size_t done = 0; done < n;) {
      const size_t count = std::min(n - done, kMaxCount / 4);
      MPI_Request request = MPI_REQUEST_NULL;
      check(MPI_Iallreduce(MPI_IN_PLACE, data + done, static_cast<int>(count), MPI_FLOAT, MPI_SUM,
                           MPI_COMM_WORLD, &request),
            "all-reduce (start)");
      pending_.push_back(request);
      done += count;
    }
  }

  void progress_reductions() override {
    if (pending_.empty()) return;
    int done = 0;
    check(MPI_Testall(static_cast<int>(pending_.size()), pending_.data(), &done,
                      MPI_STATUSES_IGNORE),
          "all-reduce (progress)");
    if (done) pending_.clear();
  }

  void wait_reductions() override {
    if (pending_.empty()) return;
    Waiting w(*this, "all-reduce");
    check(MPI_Waitall(static_cast<int>(pending_.size()), pending_.data(), MPI_STATUSES_IGNORE),
          "all-reduce");
    pending_.clear();
  }

  void broadcast(void* data, size_t bytes, int root) override {
    RETNET_CHECK(root >= 0 && root < size_, "broadcast from rank {} in a job of {} ranks", root,
                 size_);
    Waiting w(*this, "broadcast");
    auto* p = static_cast<char*>(data);
    for (size_t done = 0; done < bytes;) {
      const int count = static_cast<int>(std::min<size_t>(bytes - done, kMaxCount));
      check(MPI_Bcast(p + done, count, MPI_BYTE, root, MPI_COMM_WORLD), "broadcast");
      done += static_cast<size_t>(count);
    }
  }

  void barrier() override {
    Waiting w(*this, "barrier");
    check(MPI_Barrier(MPI_COMM_WORLD), "barrier");
  }

  void all_gather(const void* mine, void* all, size_t bytes) override {
    RETNET_CHECK(bytes <= kMaxCount, "all-gather of {} bytes per rank: at most {}", bytes,
                 kMaxCount);
    Waiting w(*this, "all-gather");
    check(MPI_Allgather(mine, static_cast<int>(bytes), MPI_BYTE, all, static_cast<int>(bytes),
                        MPI_BYTE, MPI_COMM_WORLD),
          "all-gather");
  }

  [[noreturn]] void abort(const std::string& message, int status) override {
    std::fprintf(stderr, "retnet: error: rank %d of %d: %s\n", rank_, size_, message.c_str());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, status);
    std::_Exit(status);  // MPI_Abort does not return; this is for a broken MPI
  }

 private:
  static constexpr size_t kMaxCount = INT_MAX / 8 * 8;
  // Gradient all-reduces go in buckets of this many elements: MPI counts are ints, and buckets
  // let the next one's sends start while the previous one's sums finish.
  static constexpr size_t kBucket = size_t{1} << 22;

  // Marks the main thread as waiting in a collective for the watchdog.
  struct Waiting {
    MpiCommunicator& c;
    Waiting(MpiCommunicator& comm, const char* what) : c(comm) {
      c.what_.store(what);
      c.since_ns_.store(Clock::now().time_since_epoch().count());
    }
    ~Waiting() { c.since_ns_.store(0); }
  };

  void reduce(void* data, size_t n, MPI_Datatype type, size_t elem) {
    Waiting w(*this, "all-reduce");
    auto* p = static_cast<char*>(data);
    for (size_t done = 0; done < n;) {
      const size_t count = std::min(n - done, kBucket);
      check(MPI_Allreduce(MPI_IN_PLACE, p + done * elem, static_cast<int>(count), type, MPI_SUM,
                          MPI_COMM_WORLD),
            "all-reduce");
      done += count;
    }
  }

  void check(int rc, const char* what) const {
    if (rc == MPI_SUCCESS) return;
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, text, &len);
    throw Error(fmt::format("MPI {} failed on rank {} of {}: {}", what, rank_, size_,
                            std::string(text, static_cast<size_t>(len))));
  }

  void watch() {
    std::unique_lock<std::mutex> lock(mutex_);
    while (!wake_.wait_for(lock, std::chrono::milliseconds(200), [this] { return stopping_; })) {
      const int64_t since = since_ns_.load();
      const double limit = timeout();
      if (since == 0 || limit <= 0) continue;
      const double waited =
          std::chrono::duration<double>(Clock::now().time_since_epoch() -
                                        Clock::duration(since))
              .count();
      if (waited < limit) continue;
      std::fprintf(stderr,
                   "retnet: error: rank %d of %d waited %.0f s in %s for the other ranks (limit "
                   "%.0f s, --comm-timeout): a rank died or hung; ending the job\n",
                   rank_, size_, waited, what_.load(), limit);
      std::fflush(stderr);
      MPI_Abort(MPI_COMM_WORLD, 1);
      std::_Exit(1);
    }
  }

  int rank_ = 0, size_ = 1;
  std::vector<MPI_Request> pending_;  // started reductions (completed ones are MPI_REQUEST_NULL)
  std::atomic<int64_t> since_ns_{0};  // when the current collective began; 0: none
  std::atomic<const char*> what_{""};
  std::thread watchdog_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
};

}  // namespace

std::unique_ptr<Communicator> make_mpi_communicator() {
  return std::make_unique<MpiCommunicator>();
}

}  // namespace retnet
