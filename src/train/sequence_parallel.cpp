#include "sequence_parallel.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "retnet/core/error.h"
#include "retnet/model/training.h"

namespace retnet {

TokenSlice sequence_slice(int64_t T, int rank, int ranks) {
  RETNET_CHECK(ranks >= 1 && rank >= 0 && rank < ranks, "rank {} of {} ranks", rank, ranks);
  RETNET_CHECK(T >= ranks,
               "sequence parallel training over {} ranks needs sequences of at least {} tokens, "
               "got --seq {}",
               ranks, ranks, T);
  const int64_t base = T / ranks, extra = T % ranks;
  return {rank * base + std::min<int64_t>(rank, extra), base + (rank < extra ? 1 : 0)};
}

// The scans change their decay argument; the link's is the caller's.
void CommunicatorSliceLink::scan_earlier(float* state, const float* decay, size_t n) {
  std::vector<float> d(decay, decay + n);
  state_decay_exclusive_scan(comm_, state, d.data(), n);
}

void CommunicatorSliceLink::scan_later(float* d_state, const float* decay, size_t n) {
  std::vector<float> d(decay, decay + n);
  state_decay_reverse_exclusive_scan(comm_, d_state, d.data(), n);
}

// The scans write their result apart from their input.
void CommunicatorSliceLink::fold_earlier(float* record, size_t n, const float* identity,
                                         const Combine& combine) {
  std::vector<float> mine(record, record + n);
  exclusive_scan(comm_, mine.data(), record, n, identity, combine);
}

void CommunicatorSliceLink::fold_later(float* record, size_t n, const float* identity,
                                       const Combine& combine) {
  std::vector<float> mine(record, record + n);
  reverse_exclusive_scan(comm_, mine.data(), record, n, identity, combine);
}

double sequence_parallel_loss_and_gradients(Communicator& comm, const Model& model,
                                            const int32_t* tokens, const int32_t* targets,
                                            int64_t B, int64_t T, int64_t chunk, Arena& arena,
                                            ParamBuffer* grads) {
  check_slices_supported(model.config());
  const TokenSlice s = sequence_slice(T, comm.rank(), comm.size());
  std::vector<int32_t> in(static_cast<size_t>(B * s.length)), tgt(in.size());
  for (int64_t b = 0; b < B; ++b) {
    std::memcpy(in.data() + b * s.length, tokens + b * T + s.begin,
                static_cast<size_t>(s.length) * sizeof(int32_t));
    std::memcpy(tgt.data() + b * s.length, targets + b * T + s.begin,
                static_cast<size_t>(s.length) * sizeof(int32_t));
  }
  CommunicatorSliceLink link(comm);
  TrainingOptions o;
  o.form = Form::Chunkwise;
  o.chunk = chunk;
  o.link = &link;
  o.position0 = s.begin;
  o.grad_tokens = B * T;
  const double mean =
      loss_and_gradients(model, in.data(), tgt.data(), B, s.length, o, arena, grads);
  return mean * static_cast<double>(s.length) / static_cast<double>(T);
}

Evaluation sequence_parallel_evaluate(Communicator& comm, const Model& model,
                                      std::span<const int32_t> tokens, const EvalOptions& o,
                                      Arena& arena) {
  // The shorter last window only if every rank gets a token of it.
  return evaluate_windows(tokens, o, comm.size(), [&](const int32_t* in, const int32_t* target,
                                                      int64_t rows, int64_t T) {
    double share = sequence_parallel_loss_and_gradients(comm, model, in, target, rows, T,
                                                        o.form.chunk, arena, nullptr);
    comm.all_reduce_sum(&share, 1);
    return share;
  });
}

}  // namespace retnet
