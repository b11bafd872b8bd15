#include "gradient_buckets.h"

#include <algorithm>

#include "retnet/core/error.h"

namespace retnet {

GradientBuckets::GradientBuckets(size_t total, size_t bucket_floats)
    : total_(total), bucket_floats_(bucket_floats) {
  RETNET_CHECK(bucket_floats >= 1, "a gradient bucket needs at least 1 float, got {}",
               bucket_floats);
  taken_.reserve(64);
}

void GradientBuckets::reset() {
  pending_ = {};
  taken_.clear();
}

void GradientBuckets::launch_pending(const Launch& launch) {
  if (pending_.size() == 0) return;
  const FloatRange bucket = pending_;
  pending_ = {};
  launch(bucket);
}

void GradientBuckets::ready(size_t begin, size_t end, const Launch& launch) {
  RETNET_CHECK(begin < end && end <= total_,
               "gradient range [{}, {}) is empty or outside the buffer of {} floats", begin, end,
               total_);
  for (const FloatRange& t : taken_)
    RETNET_CHECK(end <= t.begin || begin >= t.end,
                 "gradient range [{}, {}) overlaps [{}, {}), reported before in this step", begin,
                 end, t.begin, t.end);
  taken_.push_back({begin, end});
  // The backward pass walks the layers last to first, so a range usually ends where the pending
  // bucket begins; one that begins where it ends is adjacent too.
  if (pending_.size() > 0 && end == pending_.begin)
    pending_.begin = begin;
  else if (pending_.size() > 0 && begin == pending_.end)
    pending_.end = end;
  else {
    launch_pending(launch);
    pending_ = {begin, end};
  }
  if (pending_.size() >= bucket_floats_) launch_pending(launch);
}

void GradientBuckets::finish(const Launch& launch) {
  launch_pending(launch);
  // The gaps between reported ranges, in ascending order.
  std::sort(taken_.begin(), taken_.end(),
            [](const FloatRange& a, const FloatRange& b) { return a.begin < b.begin; });
  size_t at = 0;
  auto fill = [&](size_t to) {
    for (; at < to; at = std::min(to, at + bucket_floats_))
      launch({at, std::min(to, at + bucket_floats_)});
  };
  for (const FloatRange& t : taken_) {
    fill(t.begin);
    at = t.end;
  }
  fill(total_);
  taken_.clear();
}

}  // namespace retnet
