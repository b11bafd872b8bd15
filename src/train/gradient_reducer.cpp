#include "gradient_reducer.h"

namespace retnet {

GradientReducer::GradientReducer(Communicator& comm, ParamBuffer& grads, size_t bucket_floats)
    : comm_(comm), grads_(grads), plan_(grads.size(), bucket_floats) {
  launch_ = [this](FloatRange bucket) {
    float* p = grads_.data() + bucket.begin;
    if (scale_ != 1.f)
      for (size_t i = 0; i < bucket.size(); ++i) p[i] *= scale_;
    comm_.start_all_reduce_sum(p, bucket.size());
    ++count_;
  };
}

void GradientReducer::begin(float scale) {
  plan_.reset();
  scale_ = scale;
  count_ = 0;
}

void GradientReducer::ready(size_t begin, size_t end) {
  plan_.ready(begin, end, launch_);
  comm_.progress_reductions();
}

void GradientReducer::finish() {
  plan_.finish(launch_);
  comm_.wait_reductions();
  last_buckets_ = count_;
  const float s = 1.f / static_cast<float>(comm_.size());
  float* g = grads_.data();
  for (size_t i = 0; i < grads_.size(); ++i) g[i] *= s;
}

}  // namespace retnet
