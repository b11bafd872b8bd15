// Data parallel's gradient buckets without MPI: how reported ranges group into buckets, that the
// whole buffer is reduced exactly once, and that the reducer's result is the average over ranks.
#include <gtest/gtest.h>

#include <vector>

#include "../../src/train/gradient_buckets.h"
#include "../../src/train/gradient_reducer.h"
#include "retnet/core/error.h"

namespace retnet {
namespace {

std::vector<FloatRange> ready_all(GradientBuckets& b, const std::vector<FloatRange>& ranges,
                                  bool finish = true) {
  std::vector<FloatRange> got;
  auto launch = [&](FloatRange r) { got.push_back(r); };
  for (const FloatRange& r : ranges) b.ready(r.begin, r.end, launch);
  if (finish) b.finish(launch);
  return got;
}

// Every float of [0, total) in exactly one bucket.
void expect_cover_once(const std::vector<FloatRange>& buckets, size_t total) {
  std::vector<int> hits(total, 0);
  for (const FloatRange& r : buckets) {
    ASSERT_LT(r.begin, r.end);
    ASSERT_LE(r.end, total);
    for (size_t i = r.begin; i < r.end; ++i) ++hits[i];
  }
  for (size_t i = 0; i < total; ++i) ASSERT_EQ(hits[i], 1) << "float " << i;
}

TEST(GradientBuckets, LayersLastToFirstGroupIntoBucketsOfAtLeastTheSize) {
  // A buffer like a model's: embedding [0, 100), 4 layers of 30, final norm and head [220, 250).
  GradientBuckets b(250, 60);
  const std::vector<FloatRange> got =
      ready_all(b, {{220, 250}, {190, 220}, {160, 190}, {130, 160}, {100, 130}, {0, 100}});
  const std::vector<FloatRange> want = {{190, 250}, {130, 190}, {0, 130}};
  EXPECT_EQ(got, want);
  expect_cover_once(got, 250);
}

TEST(GradientBuckets, AFullBucketIsLaunchedAsSoonAsItsLastRangeIsReady) {
  GradientBuckets b(100, 20);
  std::vector<FloatRange> got;
  auto launch = [&](FloatRange r) { got.push_back(r); };
  b.ready(90, 100, launch);
  EXPECT_TRUE(got.empty());  // 10 floats: not yet a bucket
  b.ready(70, 90, launch);
  ASSERT_EQ(got.size(), 1u);  // 30 floats now
  EXPECT_EQ(got[0], (FloatRange{70, 100}));
  b.ready(40, 70, launch);  // 30 floats on its own: launched at once
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[1], (FloatRange{40, 70}));
}

TEST(GradientBuckets, UnreportedPartsAreReducedAtFinishInBucketSizedPieces) {
  GradientBuckets b(100, 15);
  // Only [60, 70) and [30, 40) reported; not adjacent, so the first is launched alone.
  const std::vector<FloatRange> got = ready_all(b, {{60, 70}, {30, 40}});
  const std::vector<FloatRange> want = {{60, 70}, {30, 40}, {0, 15}, {15, 30},
                                        {40, 55}, {55, 60}, {70, 85}, {85, 100}};
  EXPECT_EQ(got, want);
  expect_cover_once(got, 100);
}

TEST(GradientBuckets, RangesInAscendingOrderJoinToo) {
  GradientBuckets b(40, 1000);
  EXPECT_EQ(ready_all(b, {{0, 10}, {10, 25}, {25, 40}}), (std::vector<FloatRange>{{0, 40}}));
}

TEST(GradientBuckets, ResetStartsANewStepWithTheSameBuckets) {
  GradientBuckets b(250, 60);
  const std::vector<FloatRange> ranges = {{220, 250}, {190, 220}, {160, 190},
                                          {130, 160}, {100, 130}, {0, 100}};
  const std::vector<FloatRange> first = ready_all(b, ranges);
  b.reset();
  EXPECT_EQ(ready_all(b, ranges), first);
}

TEST(GradientBuckets, BadRangesAreRefused) {
  GradientBuckets b(100, 10);
  auto launch = [](FloatRange) {};
  EXPECT_THROW(b.ready(90, 101, launch), Error);  // past the end
  EXPECT_THROW(b.ready(50, 50, launch), Error);   // empty
  b.ready(20, 40, launch);
  EXPECT_THROW(b.ready(30, 50, launch), Error);  // overlaps a reported range
  EXPECT_THROW(GradientBuckets(100, 0), Error);
}

// A rank of a job of `ranks` whose other ranks hold the same gradients: a sum is `ranks` times
// this rank's values. Records the reductions and checks none is started on floats still pending.
class MirrorRanks final : public Communicator {
 public:
  explicit MirrorRanks(int ranks) : ranks_(ranks) {}
  int rank() const override { return 0; }
  int size() const override { return ranks_; }
  std::string backend() const override { return "mirror"; }
  void all_reduce_sum(float* data, size_t n) override {
    for (size_t i = 0; i < n; ++i) data[i] *= static_cast<float>(ranks_);
  }
  void all_reduce_sum(double* data, size_t n) override {
    for (size_t i = 0; i < n; ++i) data[i] *= ranks_;
  }
  void start_all_reduce_sum(float* data, size_t n) override {
    started.push_back({data, n});
  }
  void progress_reductions() override { ++progress_calls; }
  void wait_reductions() override {
    for (auto [data, n] : started) all_reduce_sum(data, n);
    waited += started.size();
    started.clear();
  }
  void broadcast(void*, size_t, int) override {}
  void barrier() override {}
  void all_gather(const void*, void*, size_t) override {}
  [[noreturn]] void abort(const std::string& message, int) override { throw Error(message); }

  std::vector<std::pair<float*, size_t>> started;
  size_t waited = 0;
  int progress_calls = 0;

 private:
  int ranks_;
};

TEST(GradientReducer, AveragesOverRanksAfterScalingEachBucketOnce) {
  ParamLayout layout;
  layout.add("a", {7, 5});
  layout.add("b", {11});
  layout.add("c", {3, 4});
  ParamBuffer grads(layout);
  for (size_t i = 0; i < grads.size(); ++i) grads.data()[i] = static_cast<float>(i) + 1.f;
  MirrorRanks comm(4);
  GradientReducer reducer(comm, grads, 16);
  const size_t b_begin = layout[1].offset, c_begin = layout[2].offset;
  reducer.begin(0.5f);  // two micro-batches
  reducer.ready(c_begin, grads.size());
  reducer.ready(b_begin, c_begin);
  EXPECT_EQ(comm.progress_calls, 2);
  EXPECT_GE(comm.started.size(), 1u);  // the last two tensors make a full bucket
  reducer.finish();
  EXPECT_TRUE(comm.started.empty());
  EXPECT_EQ(static_cast<int>(comm.waited), reducer.buckets());
  // (4 identical ranks x 0.5 x g) / 4 = 0.5 g, on every float, whether reported or not.
  for (size_t i = 0; i < grads.size(); ++i)
    ASSERT_EQ(grads.data()[i], 0.5f * (static_cast<float>(i) + 1.f)) << "float " << i;
}

}  // namespace
}  // namespace retnet
