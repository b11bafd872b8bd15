// Run under `mpirun -np N` (N >= 2): every collective of the MPI communicator against what each
// rank can compute alone. Exits 0 when all agree, 1 with the first mismatch named.
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "retnet/core/error.h"
#include "retnet/dist/communicator.h"

using namespace retnet;

namespace {

int failures = 0;
void expect(bool ok, const std::string& what, int rank) {
  if (ok) return;
  std::fprintf(stderr, "rank %d: %s\n", rank, what.c_str());
  ++failures;
}

// A value every rank can compute for any rank: exact in float (small integers over 4).
float value(int rank, size_t i) { return static_cast<float>((rank + 1) * static_cast<int>(i % 97)) * 0.25f; }

void matmul2(float* acc, const float* x) {
  const float a = acc[0] * x[0] + acc[1] * x[2], b = acc[0] * x[1] + acc[1] * x[3];
  const float c = acc[2] * x[0] + acc[3] * x[2], d = acc[2] * x[1] + acc[3] * x[3];
  acc[0] = a, acc[1] = b, acc[2] = c, acc[3] = d;
}

}  // namespace

int main() {
  try {
    Communicator& comm = world();
    comm.set_timeout(60);
    const int r = comm.rank(), N = comm.size();
    expect(N >= 2 && comm.backend() == "mpi", "expected the MPI backend with >= 2 ranks, got " +
                                                  comm.backend() + " with " + std::to_string(N),
           r);

    // All-reduce over more than one bucket (4 Mi floats) and an odd tail.
    const size_t n = (size_t{1} << 22) + 5;
    std::vector<float> x(n);
    for (size_t i = 0; i < n; ++i) x[i] = value(r, i);
    comm.all_reduce_sum(x.data(), n);
    bool ok = true;
    for (size_t i = 0; i < n && ok; ++i) {
      float sum = 0;
      for (int j = 0; j < N; ++j) sum += value(j, i);
      ok = x[i] == sum;
    }
    expect(ok, "float all-reduce differs from the sum", r);
    double d[2] = {r + 0.5, 1.0};
    comm.all_reduce_sum(d, 2);
    expect(d[0] == N * (N - 1) / 2.0 + 0.5 * N && d[1] == N, "double all-reduce", r);

    // Broadcast from the last rank.
    std::vector<int> b(1000, r);
    comm.broadcast(b.data(), b.size() * sizeof(int), N - 1);
    expect(b.front() == N - 1 && b.back() == N - 1, "broadcast from the last rank", r);

    std::vector<int> gathered(static_cast<size_t>(N), -1);
    const int mine = 10 * r + 3;
    comm.all_gather(&mine, gathered.data(), sizeof mine);
    for (int j = 0; j < N; ++j) expect(gathered[j] == 10 * j + 3, "all-gather, rank " + std::to_string(j), r);

    // Exclusive scan, non-commutative combine: the product of the earlier ranks' matrices in order.
    auto matrix = [](int j) { return std::vector<float>{1.f + j, 0.5f, -0.25f * j, 1.f}; };
    const float identity[4] = {1, 0, 0, 1};
    float out[4];
    exclusive_scan(comm, matrix(r).data(), out, 4, identity, matmul2);
    std::vector<float> expect_m(identity, identity + 4);
    for (int j = 0; j < r; ++j) matmul2(expect_m.data(), matrix(j).data());
    // Up to rounding (FMA contraction may differ between call sites); another order differs by O(1).
    bool same = true;
    for (int i = 0; i < 4; ++i) same = same && std::fabs(out[i] - expect_m[i]) <= 1e-5f * (1 + std::fabs(expect_m[i]));
    expect(same, "exclusive scan order", r);

    // (state, decay) scan: each rank's slice is 2 steps of a 3-channel recurrence.
    auto step_input = [](int t, int c) { return 0.1f * static_cast<float>((t * 3 + c) % 7) - 0.3f; };
    auto step_decay = [](int t, int c) { return 0.9f - 0.01f * static_cast<float>((t + c) % 5); };
    float state[3] = {0, 0, 0}, decay[3] = {1, 1, 1};
    for (int t = 2 * r; t < 2 * r + 2; ++t)
      for (int c = 0; c < 3; ++c) {
        state[c] = step_decay(t, c) * state[c] + step_input(t, c);
        decay[c] *= step_decay(t, c);
      }
    state_decay_exclusive_scan(comm, state, decay, 3);
    for (int c = 0; c < 3; ++c) {
      double h = 0, p = 1;
      for (int t = 0; t < 2 * r; ++t) h = step_decay(t, c) * h + step_input(t, c), p *= step_decay(t, c);
      expect(std::fabs(state[c] - h) <= 1e-6 * (1 + std::fabs(h)) && std::fabs(decay[c] - p) <= 1e-6,
             "state/decay scan, channel " + std::to_string(c), r);
    }
    comm.barrier();
    if (failures == 0 && r == 0) std::printf("comm_check: %d ranks: every collective agrees\n", N);
    return failures == 0 ? 0 : 1;
  } catch (const Error& e) {
    std::fprintf(stderr, "comm_check: error: %s\n", e.what());
    return 1;
  }
}
