#include "retnet/dist/communicator.h"

#include <cstdio>
#include <cstdlib>
#include <algorithm>
#include <cstring>
#include <vector>

#include "mpi_backend.h"
#include "retnet/core/error.h"

namespace retnet {
namespace {

class SingleProcessCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string backend() const override { return "single"; }
  void all_reduce_sum(float*, size_t) override {}
  void all_reduce_sum(double*, size_t) override {}
  void broadcast(void*, size_t, int root) override {
    RETNET_CHECK(root == 0, "broadcast from rank {} in a job of one rank", root);
  }
  void barrier() override {}
  void all_gather(const void* mine, void* all, size_t bytes) override {
    if (bytes > 0) std::memmove(all, mine, bytes);
  }
  [[noreturn]] void abort(const std::string& message, int status) override {
    std::fprintf(stderr, "retnet: error: %s\n", message.c_str());
    std::fflush(stderr);
    std::_Exit(status);
  }
};

// The ranks of the job the launcher started this process in (1 when started alone): Open MPI's
// mpirun, MPICH/Hydra and Slurm's PMI set these.
long launched_ranks() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE"})
    if (const char* v = std::getenv(name)) return std::strtol(v, nullptr, 10);
  return std::getenv("PMIX_RANK") ? -1 : 1;  // launched, size unknown
}

std::unique_ptr<Communicator> make_world() {
  const long ranks = launched_ranks();
  if (ranks == 1) return make_single_process_communicator();
  auto mpi = make_mpi_communicator();
  // Without MPI, N copies would each train alone on the same directory: refuse instead.
  RETNET_CHECK(mpi != nullptr,
               "this process was started by an MPI launcher ({} ranks) but retnet was built "
               "without MPI; install libopenmpi-dev and rebuild (RETNET_MPI=ON)",
               ranks < 0 ? std::string("unknown number of") : std::to_string(ranks));
  return mpi;
}

}  // namespace

std::unique_ptr<Communicator> make_single_process_communicator() {
  return std::make_unique<SingleProcessCommunicator>();
}

Communicator& world() {
  static std::unique_ptr<Communicator> comm = make_world();
  return *comm;
}

namespace {

// Every rank's record of n floats, in rank order, on every rank; out starts as the identity.
// Both scans then fold the records of the ranks before (or after) this one in order: the same
// order of operations as one process running the slices one after another. N records of n floats
// is small next to what a rank holds (n is a state's size, N the ranks of one sequence).
std::vector<float> gather_records(Communicator& comm, const float* mine, float* out, size_t n,
                                  const float* identity) {
  std::vector<float> all(n * static_cast<size_t>(comm.size()));
  comm.all_gather(mine, all.data(), n * sizeof(float));
  std::memcpy(out, identity, n * sizeof(float));
  return all;
}

}  // namespace

void exclusive_scan(Communicator& comm, const float* mine, float* out, size_t n,
                    const float* identity,
                    const std::function<void(float* acc, const float* x)>& combine) {
  const std::vector<float> all = gather_records(comm, mine, out, n, identity);
  for (int j = 0; j < comm.rank(); ++j) combine(out, all.data() + static_cast<size_t>(j) * n);
}

void reverse_exclusive_scan(Communicator& comm, const float* mine, float* out, size_t n,
                            const float* identity,
                            const std::function<void(float* acc, const float* x)>& combine) {
  const std::vector<float> all = gather_records(comm, mine, out, n, identity);
  for (int j = comm.size() - 1; j > comm.rank(); --j)
    combine(out, all.data() + static_cast<size_t>(j) * n);
}

namespace {

// The (state, decay) scan in rank order or in reverse: every rank gathers all records (the
// state's n floats, then the decays' n floats) and folds those before it in that order.
void state_decay_scan(Communicator& comm, float* state, float* decay, size_t n, bool reverse) {
  std::vector<float> mine(2 * n), all(2 * n * static_cast<size_t>(comm.size()));
  std::memcpy(mine.data(), state, n * sizeof(float));
  std::memcpy(mine.data() + n, decay, n * sizeof(float));
  comm.all_gather(mine.data(), all.data(), 2 * n * sizeof(float));
  std::fill(state, state + n, 0.f);
  std::fill(decay, decay + n, 1.f);
  auto combine = [&](const float* x) {
    for (size_t i = 0; i < n; ++i) {
      state[i] = x[n + i] * state[i] + x[i];
      decay[i] *= x[n + i];
    }
  };
  const int r = comm.rank(), N = comm.size();
  if (reverse)
    for (int j = N - 1; j > r; --j) combine(all.data() + static_cast<size_t>(j) * 2 * n);
  else
    for (int j = 0; j < r; ++j) combine(all.data() + static_cast<size_t>(j) * 2 * n);
}

}  // namespace

void state_decay_exclusive_scan(Communicator& comm, float* state, float* decay, size_t n) {
  state_decay_scan(comm, state, decay, n, false);
}

void state_decay_reverse_exclusive_scan(Communicator& comm, float* state, float* decay, size_t n) {
  state_decay_scan(comm, state, decay, n, true);
}

}  // namespace retnet
