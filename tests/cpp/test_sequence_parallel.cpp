// Sequence parallel training without mpirun: the slices of a batch run on threads joined by an
// in-process communicator, through the same code the MPI ranks run, and their summed loss and
// gradients must equal one pass over the whole sequences (the chunkwise form, whose chunks the
// slices' boundaries cut anywhere). Also the slicing and the refusals.
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "../../src/train/sequence_parallel.h"
#include "retnet/core/rng.h"
#include "retnet/mixers/retention.h"
#include "retnet/model/training.h"
#include "test_helpers.h"

using namespace retnet;
using retnet::test::close;

namespace {

// N threads as the ranks of one job: every collective meets at a generation barrier and works
// on a shared board of every rank's bytes.
struct Board {
  explicit Board(int n) : ranks(n), slots(static_cast<size_t>(n)) {}
  int ranks;
  std::mutex m;
  std::condition_variable cv;
  int arrived = 0;
  long generation = 0;
  std::vector<std::vector<char>> slots;
  void wait_all() {
    std::unique_lock<std::mutex> lock(m);
    const long g = generation;
    if (++arrived == ranks) {
      arrived = 0;
      ++generation;
      cv.notify_all();
    } else {
      cv.wait(lock, [&] { return generation != g; });
    }
  }
};

class ThreadCommunicator final : public Communicator {
 public:
  ThreadCommunicator(Board& board, int rank) : board_(board), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return board_.ranks; }
  std::string backend() const override { return "threads"; }
  void all_reduce_sum(float* data, size_t n) override { reduce(data, n); }
  void all_reduce_sum(double* data, size_t n) override { reduce(data, n); }
  void broadcast(void* data, size_t bytes, int root) override {
    post(data, bytes);
    std::memcpy(data, board_.slots[static_cast<size_t>(root)].data(), bytes);
    board_.wait_all();
  }
  void barrier() override { board_.wait_all(); }
  void all_gather(const void* mine, void* all, size_t bytes) override {
    post(mine, bytes);
    for (int r = 0; r < board_.ranks; ++r)
      std::memcpy(static_cast<char*>(all) + r * bytes, board_.slots[static_cast<size_t>(r)].data(),
                  bytes);
    board_.wait_all();  // nobody posts again before everyone has read
  }
  [[noreturn]] void abort(const std::string& message, int) override {
    throw std::runtime_error(message);
  }

 private:
  void post(const void* data, size_t bytes) {
    auto& slot = board_.slots[static_cast<size_t>(rank_)];
    slot.assign(static_cast<const char*>(data), static_cast<const char*>(data) + bytes);
    board_.wait_all();
  }
  template <class F>
  void reduce(F* data, size_t n) {
    post(data, n * sizeof(F));
    for (size_t i = 0; i < n; ++i) {
      F s = 0;
      for (int r = 0; r < board_.ranks; ++r)
        s += reinterpret_cast<const F*>(board_.slots[static_cast<size_t>(r)].data())[i];
      data[i] = s;
    }
    board_.wait_all();
  }
  Board& board_;
  int rank_;
};

struct Batch {
  int64_t B, T;
  std::vector<int32_t> tokens, targets;
};

Batch make_batch(int64_t B, int64_t T, int32_t vocab) {
  Batch b{B, T, std::vector<int32_t>(B * T), std::vector<int32_t>(B * T)};
  for (int64_t i = 0; i < B * T; ++i) {
    b.tokens[i] = static_cast<int32_t>((i * 7 + 3) % vocab);
    b.targets[i] = static_cast<int32_t>((i * 11 + 1) % vocab);
  }
  return b;
}

// The slices on `ranks` threads: the summed loss, and the summed gradients in `sum`.
double sliced_pass(const Model& m, const Batch& b, int ranks, int64_t chunk, ParamBuffer& sum) {
  Board board(ranks);
  std::vector<double> losses(static_cast<size_t>(ranks));
  std::vector<ParamBuffer> grads;
  for (int r = 0; r < ranks; ++r) grads.emplace_back(m.params().layout());
  std::vector<std::string> errors(static_cast<size_t>(ranks));
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r)
    threads.emplace_back([&, r] {
      try {
        ThreadCommunicator comm(board, r);
        Arena arena;
        losses[r] = sequence_parallel_loss_and_gradients(comm, m, b.tokens.data(),
                                                         b.targets.data(), b.B, b.T, chunk, arena,
                                                         &grads[r]);
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  double loss = 0;
  std::fill(sum.data(), sum.data() + sum.size(), 0.f);
  for (int r = 0; r < ranks; ++r) {
    EXPECT_EQ(errors[r], "") << "rank " << r;
    loss += losses[r];
    for (size_t i = 0; i < sum.size(); ++i) sum.data()[i] += grads[r].data()[i];
  }
  return loss;
}

// Slices on 2 and 3 ranks equal the whole sequences in the loss and every tensor's gradient.
void expect_slices_match_whole(const Config& c, int64_t B, int64_t T, int64_t chunk) {
  const Model m = Model::init(c, 11);
  const Batch b = make_batch(B, T, static_cast<int32_t>(c.vocab_size));
  Arena arena;
  ParamBuffer whole(m.params().layout());
  TrainingOptions o;
  o.form = Form::Chunkwise;
  o.chunk = chunk;
  const double loss = loss_and_gradients(m, b.tokens.data(), b.targets.data(), B, T, o, arena,
                                         &whole);
  for (int ranks : {2, 3}) {
    ParamBuffer sum(m.params().layout());
    const double sliced = sliced_pass(m, b, ranks, chunk, sum);
    EXPECT_NEAR(sliced, loss, 1e-5 * loss) << ranks << " ranks";
    for (const ParamEntry& e : m.params().layout().entries()) {
      const std::vector<float> got(sum.data() + e.offset, sum.data() + e.offset + e.numel);
      const std::vector<float> want(whole.data() + e.offset, whole.data() + e.offset + e.numel);
      EXPECT_TRUE(close(got, want, 1e-5)) << e.name << " over " << ranks << " ranks";
    }
  }
}

}  // namespace

TEST(SequenceParallel, RetentionSliceSummaryIsTheStateFromEmptyAndItsBackwardItsAdjoint) {
  const int64_t B = 2, T = 23, H = 2, Dk = 4, Dv = 3, E = Dk * (Dv + 1), S = H * E;
  std::vector<float> q(B * T * H * Dk), k(q.size()), v(B * T * H * Dv), out(v.size());
  const Philox rng(5);
  uint64_t draws = 0;
  auto next = [&] { return static_cast<float>(2.0 * rng.uniform(0, draws++) - 1.0); };
  for (auto* x : {&q, &k, &v})
    for (float& e : *x) e = next();
  const double gammas[H] = {0.9, 0.6};
  auto view = [&](std::vector<float>& x, int64_t D) {
    return TensorView::contiguous(x.data(), {B, T, H, D});
  };
  // The summary equals the state the recurrent form leaves from an empty one.
  std::vector<float> summary(B * S), decay(B * S), state(B * S, 0.f);
  retention_slice_summary(view(k, Dk), view(v, Dv), gammas, summary.data(), decay.data(), S);
  RetentionArgs ra;
  ra.q = view(q, Dk), ra.k = view(k, Dk), ra.v = view(v, Dv), ra.out = view(out, Dv);
  ra.gammas = gammas, ra.state = state.data(), ra.state_stride = S;
  Arena arena(1 << 16);
  retention_forward(Form::Recurrent, ra, arena);
  EXPECT_TRUE(close(summary, state, 1e-5));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      EXPECT_FLOAT_EQ(decay[b * S + h * E + 5], static_cast<float>(std::pow(gammas[h], T)));
  // The summary is linear in k and in v, so for any dU: sum dU . U = sum dk . k = sum dv . v.
  std::vector<float> dU(B * S), dk(k.size(), 0.f), dv(v.size(), 0.f);
  for (float& e : dU) e = next();
  retention_slice_summary_backward(view(k, Dk), view(v, Dv), gammas, dU.data(), S, view(dk, Dk),
                                   view(dv, Dv));
  double through_u = 0, through_k = 0, through_v = 0;
  for (size_t i = 0; i < dU.size(); ++i) through_u += double(dU[i]) * summary[i];
  for (size_t i = 0; i < k.size(); ++i) through_k += double(dk[i]) * k[i];
  // The key-sum column is linear in k but does not depend on v.
  double key_sums = 0;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < Dk; ++i) {
        const size_t at = b * S + h * E + i * (Dv + 1) + Dv;
        key_sums += double(dU[at]) * summary[at];
      }
  for (size_t i = 0; i < v.size(); ++i) through_v += double(dv[i]) * v[i];
  EXPECT_NEAR(through_k, through_u, 1e-5 * std::fabs(through_u) + 1e-6);
  EXPECT_NEAR(through_v, through_u - key_sums, 1e-5 * std::fabs(through_u) + 1e-6);
}

TEST(SequenceParallel, SlicesAreContiguousAndCoverTheSequence) {
  const TokenSlice a = sequence_slice(37, 0, 2), b = sequence_slice(37, 1, 2);
  EXPECT_EQ(a.begin, 0);
  EXPECT_EQ(a.length, 19);
  EXPECT_EQ(b.begin, 19);
  EXPECT_EQ(b.length, 18);
  EXPECT_EQ(sequence_slice(37, 2, 3).begin, 25);
  EXPECT_EQ(sequence_slice(37, 2, 3).length, 12);
  EXPECT_THROW(sequence_slice(2, 0, 3), Error);  // fewer tokens than ranks
}

TEST(SequenceParallel, RetentionSlicesEqualTheWholeSequence) {
  // T = 37: not a multiple of the chunk (8) nor of the ranks; slices of 19 and 18, 13/12/12.
  Config c = test::tiny_config();
  c.layernorm_eps = 1e-6;
  expect_slices_match_whole(c, 2, 37, 8);
}

TEST(SequenceParallel, RetentionWithoutScoreNormalisationSlicesEqualTheWholeSequence) {
  Config c = test::fla_conventions(test::tiny_config());
  expect_slices_match_whole(c, 2, 37, 8);
}

TEST(SequenceParallel, LinearAndPerformerSlicesEqualTheWholeSequence) {
  for (const char* name : {"linear", "performer"}) {
    SCOPED_TRACE(name);
    Config c = test::tiny_config();
    c.mixer = &find_mixer(name);
    expect_slices_match_whole(c, 2, 37, 8);
  }
}

TEST(SequenceParallel, RwkvAndAftSimpleSlicesEqualTheWholeSequence) {
  // Their state is a running-maximum-scaled sum with its own combine rule; rwkv also learns the
  // decay the slices' records carry.
  for (const char* name : {"rwkv", "aft-simple"}) {
    SCOPED_TRACE(name);
    Config c = test::tiny_config();
    c.mixer = &find_mixer(name);
    expect_slices_match_whole(c, 2, 37, 8);
  }
}

TEST(SequenceParallel, HybridOfRetentionAndRwkvSlicesEqualTheWholeSequence) {
  Config c = test::tiny_config();
  Config::LayerSpec first, second;
  first.mixer = &find_mixer("retention");
  second.mixer = &find_mixer("rwkv");
  c.layer_specs = {first, second};
  expect_slices_match_whole(c, 2, 37, 8);
}

// Attention and AFT-full keep every token.
TEST(SequenceParallel, OtherMixersAreRefusedByName) {
  for (const char* name : {"attention", "aft"}) {
    Config c = test::tiny_config();
    Config::LayerSpec first, second;
    first.mixer = &find_mixer("retention");
    second.mixer = &find_mixer(name);
    c.layer_specs = {first, second};
    try {
      check_slices_supported(c);
      ADD_FAILURE() << name << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("'") + name + "'"), std::string::npos)
          << e.what();
    }
  }
}
