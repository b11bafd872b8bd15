#pragma once
// Internal to src/train (and its tests): sequence parallel training over a communicator's ranks
// (retnet/model/slice_link.h). Every rank holds the same batch of B whole sequences of T tokens;
// rank r trains the r-th of N contiguous slices of each, its chunkwise form starting from the state
// the earlier ranks' slices leave, and sends that state's gradient back to them.
#include <cstdint>
#include <span>

#include "retnet/core/arena.h"
#include "retnet/core/param_buffer.h"
#include "retnet/dist/communicator.h"
#include "retnet/model/model.h"
#include "retnet/model/slice_link.h"
#include "retnet/train/evaluate.h"

namespace retnet {

// The tokens [begin, begin + length) of a sequence of T that rank r of N takes: contiguous, in
// rank order, the first T % N ranks one token more than the others.
struct TokenSlice {
  int64_t begin = 0, length = 0;
};
TokenSlice sequence_slice(int64_t T, int rank, int ranks);

// A SliceLink whose slices are a communicator's ranks, in rank order.
class CommunicatorSliceLink final : public SliceLink {
 public:
  explicit CommunicatorSliceLink(Communicator& comm) : comm_(comm) {}

 protected:
  void scan_earlier(float* state, const float* decay, size_t n) override;
  void scan_later(float* d_state, const float* decay, size_t n) override;
  void fold_earlier(float* record, size_t n, const float* identity,
                    const Combine& combine) override;
  void fold_later(float* record, size_t n, const float* identity,
                  const Combine& combine) override;

 private:
  Communicator& comm_;
};

// This rank's share of one sequence parallel pass over tokens/targets [B, T] (the whole
// sequences, the same on every rank): returns its slice's summed loss / (B T), so that the ranks'
// shares add up to the batch's mean loss, and with grads non-null accumulates (+=) its share of
// the batch's mean gradient (the ranks' shares add up to it: a sum all-reduce). `chunk`: the
// chunkwise form's (0: the config's). Every rank must call it, in the same order.
double sequence_parallel_loss_and_gradients(Communicator& comm, const Model& model,
                                            const int32_t* tokens, const int32_t* targets,
                                            int64_t B, int64_t T, int64_t chunk, Arena& arena,
                                            ParamBuffer* grads);

// evaluate() (retnet/train/evaluate.h) over sequence parallel passes: every window's slices on the
// ranks, forward only; the same Evaluation on every rank. Every rank must call it.
Evaluation sequence_parallel_evaluate(Communicator& comm, const Model& model,
                                      std::span<const int32_t> tokens, const EvalOptions& options,
                                      Arena& arena);

}  // namespace retnet
