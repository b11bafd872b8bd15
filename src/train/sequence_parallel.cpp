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
  RETNET_CHECK(tokens.size() >= 2, "evaluation needs at least 2 tokens, got {}", tokens.size());
  RETNET_CHECK(o.seq >= 1 && o.batch >= 1, "evaluation windows of {} tokens, {} per batch", o.seq,
               o.batch);
  const int64_t T = o.seq, B = o.batch, chunk = o.form.chunk;
  const int64_t predictions = static_cast<int64_t>(tokens.size()) - 1;
  int64_t windows = predictions / T;  // whole windows, as evaluate() takes them
  if (o.max_tokens > 0) windows = std::min(windows, std::max<int64_t>(1, o.max_tokens / T));
  std::vector<int32_t> in(static_cast<size_t>(B * T)), target(in.size());
  Evaluation e;
  for (int64_t w0 = 0; w0 < windows; w0 += B) {
    const int64_t rows = std::min(B, windows - w0);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t t = 0; t < T; ++t) {
        in[r * T + t] = tokens[(w0 + r) * T + t];
        target[r * T + t] = tokens[(w0 + r) * T + t + 1];
      }
    double share = sequence_parallel_loss_and_gradients(comm, model, in.data(), target.data(),
                                                        rows, T, chunk, arena, nullptr);
    comm.all_reduce_sum(&share, 1);
    e.nats += share * rows * T;
    e.tokens += rows * T;
  }
  // The shorter last window (when the whole split is asked for), if every rank gets a token.
  const int64_t rest = predictions - windows * T;
  if ((o.max_tokens == 0 || windows == 0) && rest >= comm.size()) {
    const int32_t* start = tokens.data() + windows * T;
    double share = sequence_parallel_loss_and_gradients(comm, model, start, start + 1, 1, rest,
                                                        chunk, arena, nullptr);
    comm.all_reduce_sum(&share, 1);
    e.nats += share * rest;
    e.tokens += rest;
  }
  e.loss = e.nats / static_cast<double>(e.tokens);
  return e;
}

}  // namespace retnet
