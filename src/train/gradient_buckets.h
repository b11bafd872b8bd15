#pragma once
// Internal to src/train: which parts of the flat gradient buffer to all-reduce, and when, so that
// the reductions overlap the backward pass (data parallel). The backward pass reports ranges of the
// buffer whose gradients are final (a layer's parameters, last layer first); this groups adjacent
// ranges into buckets of at least `bucket_floats` floats and hands each bucket out as soon as it is
// full. Every rank reports the same ranges in the same order, so every rank forms the same buckets
// in the same order, which is what pairs up their reductions. No communication here (unit-tested
// without MPI).
#include <cstddef>
#include <functional>
#include <vector>

namespace retnet {

struct FloatRange {
  size_t begin = 0, end = 0;  // [begin, end), in floats from the start of the buffer
  size_t size() const { return end - begin; }
  bool operator==(const FloatRange&) const = default;
};

class GradientBuckets {
 public:
  using Launch = std::function<void(FloatRange bucket)>;

  // A buffer of `total` floats; buckets of at least `bucket_floats` (>= 1) floats where the
  // reported ranges allow (a bucket never joins ranges that are not adjacent).
  GradientBuckets(size_t total, size_t bucket_floats);

  // Starts a step: no range reported yet.
  void reset();
  // [begin, end) is final: launches the pending bucket when this range does not extend it, and
  // the bucket holding this range once it reaches bucket_floats. Throws Error for a range outside
  // the buffer or one that overlaps a range already reported.
  void ready(size_t begin, size_t end, const Launch& launch);
  // The end of the step: launches the pending bucket, then every part of the buffer never
  // reported (in ascending order, bucket_floats at a time), so that the whole buffer is reduced.
  void finish(const Launch& launch);

  size_t bucket_floats() const { return bucket_floats_; }

 private:
  void launch_pending(const Launch& launch);

  size_t total_, bucket_floats_;
  FloatRange pending_;               // reported, not yet launched (empty: none)
  std::vector<FloatRange> taken_;    // every range reported this step (capacity kept across steps)
};

}  // namespace retnet
