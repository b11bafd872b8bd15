#pragma once
// Internal to src/train: data parallel's gradient average, overlapped with the backward pass. The
// last micro-batch's backward reports each range of the gradient buffer once it is final
// (TrainingOptions::gradients_ready); the reducer groups the ranges into buckets
// (gradient_buckets.h) and starts each bucket's all-reduce at once, so the sums travel while the
// backward pass computes the earlier layers. finish() starts what is left, waits, and divides by
// the number of ranks. The result is the same as one all-reduce of the whole buffer: the same
// float operations on every element.
#include <cstddef>

#include "gradient_buckets.h"
#include "retnet/core/param_buffer.h"
#include "retnet/dist/communicator.h"

namespace retnet {

class GradientReducer {
 public:
  // Buckets of at least `bucket_floats` floats of `grads`, which must outlive the reducer.
  GradientReducer(Communicator& comm, ParamBuffer& grads, size_t bucket_floats);

  // Before the backward pass that finishes a step's gradients: each range is multiplied by
  // `scale` (1 / micro-batches) just before its reduction starts.
  void begin(float scale);
  // grads[begin, end) is final for this step.
  void ready(size_t begin, size_t end);
  // Lets the started reductions advance (call it often during the backward pass).
  void progress() { comm_.progress_reductions(); }
  // Reduces what was not reported, waits for every bucket, and leaves grads = the mean over ranks
  // of (scale x each rank's grads).
  void finish();

  // Buckets the last finished step reduced.
  int buckets() const { return last_buckets_; }

 private:
  Communicator& comm_;
  ParamBuffer& grads_;
  GradientBuckets plan_;
  GradientBuckets::Launch launch_;  // made once: no allocation per bucket
  float scale_ = 1.f;
  int count_ = 0, last_buckets_ = 0;
};

}  // namespace retnet
