#pragma once
// Communication between the processes of one training job, behind one small interface so that a
// GPU back end (NCCL) can slot in beside MPI. `world()` is MPI's world when the process was started
// by mpirun (or srun) and the engine was built with MPI, and a single-process communicator
// otherwise: the same binary runs alone, without mpirun.
//
// Every call is collective: all ranks make it, in the same order, with the same sizes. A call that
// waits longer than the timeout for the other ranks (a rank died or hung) prints a message naming
// the call and ends the whole job with a non-zero status, never a silent hang.
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace retnet {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string backend() const = 0;  // "single" or "mpi"

  // data[i] = sum over ranks of data[i], on every rank (the same bits on every rank).
  virtual void all_reduce_sum(float* data, size_t n) = 0;
  virtual void all_reduce_sum(double* data, size_t n) = 0;
  // Non-blocking all_reduce_sum: starts summing data[0, n) over ranks and returns; the sums are
  // there after wait_reductions(). Until then the caller must not touch those floats. Reductions
  // started in the same order on every rank pair up. This default reduces at once (blocking), which
  // is correct for any back end; MPI overlaps the reduction with the caller's work.
  virtual void start_all_reduce_sum(float* data, size_t n) { all_reduce_sum(data, n); }
  // Lets started reductions advance (MPI moves data only inside its calls); never waits.
  virtual void progress_reductions() {}
  // Waits until every started reduction is done (watched by the timeout like any collective).
  virtual void wait_reductions() {}
  // Rank `root`'s bytes to every rank.
  virtual void broadcast(void* data, size_t bytes, int root) = 0;
  virtual void barrier() = 0;
  // Every rank's `bytes` bytes, in rank order, into all (size() * bytes bytes) on every rank.
  virtual void all_gather(const void* mine, void* all, size_t bytes) = 0;

  // Seconds a collective may wait for the other ranks before the job is ended (0: forever).
  void set_timeout(double seconds) { timeout_s_.store(seconds); }
  double timeout() const { return timeout_s_.load(); }
  // Ends every rank of the job with `status` after printing `message` (the single-process
  // communicator exits this process).
  [[noreturn]] virtual void abort(const std::string& message, int status) = 0;

 protected:
  std::atomic<double> timeout_s_{0};  // read by a watchdog thread
};

// The process's communicator (created on first use; MPI is initialised then and finalised at exit).
Communicator& world();

// A communicator of one rank: collectives return their input.
std::unique_ptr<Communicator> make_single_process_communicator();

// Exclusive scan with a user combine over records of `n` floats: on rank r, out = x_0 (+) x_1 (+)
// ... (+) x_{r-1}, folded left in rank order, and `identity` on rank 0. combine(acc, x) replaces
// acc by acc (+) x. The combine must be associative; it need not be commutative.
void exclusive_scan(Communicator& comm, const float* mine, float* out, size_t n,
                    const float* identity,
                    const std::function<void(float* acc, const float* x)>& combine);

// The same scan over the ranks in reverse order: on rank r, out = x_{N-1} (+) x_{N-2} (+) ... (+)
// x_{r+1}, folded from the last rank down, and `identity` on the last rank. For gradients flowing
// back through a recurrence whose forward went through exclusive_scan.
void reverse_exclusive_scan(Communicator& comm, const float* mine, float* out, size_t n,
                            const float* identity,
                            const std::function<void(float* acc, const float* x)>& combine);

// The scan of linear recurrences h_t = decay_t * h_{t-1} + input_t, over (state, decay) pairs of
// `n` elements each: a rank's pair is (what its slice adds to a zero state, the product of its
// slice's decays). On rank r, state becomes the state the slices of ranks 0..r-1 leave, and decay
// the product of their decays (zeros and ones on rank 0). The pairs combine as
// (s_a, d_a) (+) (s_b, d_b) = (d_b * s_a + s_b, d_a * d_b), elementwise.
void state_decay_exclusive_scan(Communicator& comm, float* state, float* decay, size_t n);

// The same scan over the ranks in reverse order (rank N-1 first), for gradients flowing back
// through the recurrence: on rank r, state becomes sum over j > r of (decay_{r+1} ... decay_{j-1})
// * state_j, and decay the product of the later ranks' decays (zeros and ones on the last rank).
void state_decay_reverse_exclusive_scan(Communicator& comm, float* state, float* decay, size_t n);

}  // namespace retnet
