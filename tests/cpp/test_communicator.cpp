// The communication interface (dist/communicator.h): the single-process communicator, and the
// scans' folds checked on a fake communicator that plays one rank of N against naive references;
// the MPI communicator itself is checked under mpirun by tests/mpi.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "retnet/dist/communicator.h"
#include "retnet/train/data.h"
#include "test_helpers.h"

using namespace retnet;

namespace {

// Rank `rank` of `records.size()` ranks whose all_gather contributions are known in advance.
class FakeRank final : public Communicator {
 public:
  FakeRank(int rank, std::vector<std::vector<float>> records)
      : rank_(rank), records_(std::move(records)) {}
  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(records_.size()); }
  std::string backend() const override { return "fake"; }
  void all_reduce_sum(float*, size_t) override { ADD_FAILURE() << "not used by the scans"; }
  void all_reduce_sum(double*, size_t) override { ADD_FAILURE() << "not used by the scans"; }
  void broadcast(void*, size_t, int) override { ADD_FAILURE() << "not used by the scans"; }
  void barrier() override {}
  void all_gather(const void* mine, void* all, size_t bytes) override {
    const auto& own = records_[static_cast<size_t>(rank_)];
    EXPECT_EQ(bytes, own.size() * sizeof(float));
    EXPECT_EQ(std::memcmp(mine, own.data(), bytes), 0) << "rank " << rank_ << " sent another record";
    for (size_t r = 0; r < records_.size(); ++r)
      std::memcpy(static_cast<char*>(all) + r * bytes, records_[r].data(), bytes);
  }
  [[noreturn]] void abort(const std::string& message, int) override { throw Error(message); }

 private:
  int rank_;
  std::vector<std::vector<float>> records_;
};

// 2x2 matrix product acc = acc * x: associative, not commutative, so a fold in the wrong order
// fails.
void matmul2(float* acc, const float* x) {
  const float a = acc[0] * x[0] + acc[1] * x[2], b = acc[0] * x[1] + acc[1] * x[3];
  const float c = acc[2] * x[0] + acc[3] * x[2], d = acc[2] * x[1] + acc[3] * x[3];
  acc[0] = a, acc[1] = b, acc[2] = c, acc[3] = d;
}

}  // namespace

TEST(Communicator, SingleProcessIsOneRankWhoseCollectivesKeepTheInput) {
  auto comm = make_single_process_communicator();
  EXPECT_EQ(comm->rank(), 0);
  EXPECT_EQ(comm->size(), 1);
  std::vector<float> x = {1.5f, -2.f};
  comm->all_reduce_sum(x.data(), x.size());
  EXPECT_EQ(x, (std::vector<float>{1.5f, -2.f}));
  double y = 3.25;
  comm->all_reduce_sum(&y, 1);
  EXPECT_EQ(y, 3.25);
  float gathered[2] = {0, 0};
  comm->all_gather(x.data(), gathered, sizeof gathered);
  EXPECT_EQ(gathered[0], 1.5f);
  EXPECT_EQ(gathered[1], -2.f);
  EXPECT_TRUE(test::throws_error_naming([&] { comm->broadcast(&y, sizeof y, 1); }, {"rank 1"}));
  // The exclusive scan of the only rank is the identity.
  const float identity[4] = {1, 0, 0, 1}, mine[4] = {2, 3, 4, 5};
  float out[4];
  exclusive_scan(*comm, mine, out, 4, identity, matmul2);
  EXPECT_EQ(std::vector<float>(out, out + 4), std::vector<float>(identity, identity + 4));
}

TEST(Communicator, WorldIsOneProcessWithoutALauncher) {
  // ctest does not start the tests under mpirun.
  EXPECT_EQ(world().size(), 1);
  EXPECT_EQ(world().rank(), 0);
}

TEST(Communicator, ExclusiveScanFoldsEarlierRanksInOrder) {
  const int N = 4;
  std::vector<std::vector<float>> records;
  for (int r = 0; r < N; ++r) records.push_back(test::random_vector(4, 7, 1.0, static_cast<uint64_t>(r)));
  const float identity[4] = {1, 0, 0, 1};
  for (int r = 0; r < N; ++r) {
    FakeRank comm(r, records);
    float out[4];
    exclusive_scan(comm, records[static_cast<size_t>(r)].data(), out, 4, identity, matmul2);
    std::vector<float> expect(identity, identity + 4);  // naive: M_0 M_1 ... M_{r-1}
    for (int j = 0; j < r; ++j) matmul2(expect.data(), records[static_cast<size_t>(j)].data());
    // Equal up to rounding (FMA contraction may differ between the two call sites); another
    // order gives another product altogether.
    EXPECT_LE(test::rel_max_error(std::vector<float>(out, out + 4), expect), 1e-6) << "rank " << r;
  }
}

TEST(Communicator, ReverseExclusiveScanFoldsLaterRanksFromTheLast) {
  const int N = 4;
  std::vector<std::vector<float>> records;
  for (int r = 0; r < N; ++r) records.push_back(test::random_vector(4, 9, 1.0, static_cast<uint64_t>(r)));
  const float identity[4] = {1, 0, 0, 1};
  for (int r = 0; r < N; ++r) {
    FakeRank comm(r, records);
    float out[4];
    reverse_exclusive_scan(comm, records[static_cast<size_t>(r)].data(), out, 4, identity,
                           matmul2);
    std::vector<float> expect(identity, identity + 4);  // naive: M_{N-1} M_{N-2} ... M_{r+1}
    for (int j = N - 1; j > r; --j) matmul2(expect.data(), records[static_cast<size_t>(j)].data());
    EXPECT_LE(test::rel_max_error(std::vector<float>(out, out + 4), expect), 1e-6) << "rank " << r;
  }
}

TEST(Communicator, StateDecayScanEqualsTheSequentialRecurrence) {
  // h_t = decay_t * h_{t-1} + input_t over T steps of n channels, split into N uneven slices.
  const size_t n = 5;
  const std::vector<int> bounds = {0, 3, 4, 9, 11};  // slices of 3, 1, 5 and 2 steps
  const int N = static_cast<int>(bounds.size()) - 1, T = bounds.back();
  const auto inputs = test::random_vector(n * T, 11);
  std::vector<float> decays = test::random_vector(n * T, 12, 0.1);
  for (float& d : decays) d = 0.9f + d;  // decays near 0.9, like retention's
  // Each rank's pair: its slice run from a zero state, and the product of its decays.
  std::vector<std::vector<float>> records;
  for (int r = 0; r < N; ++r) {
    std::vector<float> state(n, 0.f), decay(n, 1.f);
    for (int t = bounds[r]; t < bounds[r + 1]; ++t)
      for (size_t i = 0; i < n; ++i) {
        state[i] = decays[t * n + i] * state[i] + inputs[t * n + i];
        decay[i] *= decays[t * n + i];
      }
    state.insert(state.end(), decay.begin(), decay.end());
    records.push_back(state);
  }
  for (int r = 0; r < N; ++r) {
    FakeRank comm(r, records);
    std::vector<float> state(records[r].begin(), records[r].begin() + n);
    std::vector<float> decay(records[r].begin() + n, records[r].end());
    state_decay_exclusive_scan(comm, state.data(), decay.data(), n);
    // Naive: the recurrence over every step before this rank's slice.
    std::vector<double> h(n, 0.0), prod(n, 1.0);
    for (int t = 0; t < bounds[r]; ++t)
      for (size_t i = 0; i < n; ++i) {
        h[i] = decays[t * n + i] * h[i] + inputs[t * n + i];
        prod[i] *= decays[t * n + i];
      }
    EXPECT_LE(test::rel_max_error(state, h), 1e-6) << "rank " << r;
    EXPECT_LE(test::rel_max_error(decay, prod), 1e-6) << "rank " << r;
  }
}

TEST(Communicator, RanksRowsOfABatchAreTheRowsOfTheGlobalBatch) {
  std::vector<int32_t> tokens(500);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>(i * 7 % 256);
  const int64_t B = 3, T = 16, N = 2;
  std::vector<int32_t> in(N * B * T), tgt(N * B * T);
  sample_batch(tokens, N * B, T, 5, 9, in.data(), tgt.data());
  for (int64_t r = 0; r < N; ++r) {
    std::vector<int32_t> in_r(B * T), tgt_r(B * T);
    sample_batch(tokens, B, T, 5, 9, in_r.data(), tgt_r.data(), r * B);
    EXPECT_TRUE(std::equal(in_r.begin(), in_r.end(), in.begin() + r * B * T)) << "rank " << r;
    EXPECT_TRUE(std::equal(tgt_r.begin(), tgt_r.end(), tgt.begin() + r * B * T)) << "rank " << r;
  }
  // And the rows differ from one rank to the next (the offset is used at all).
  EXPECT_FALSE(std::equal(in.begin(), in.begin() + B * T, in.begin() + B * T));
}
