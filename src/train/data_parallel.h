#pragma once
// Internal to src/train: what the trainer does differently with several ranks (data parallel,
// train/trainer.h). Rank r computes the gradients of rows [r*B, (r+1)*B) of the global batch of
// N*B rows; the ranks average their gradients with one all-reduce of the flat buffer, so every
// rank applies the same update and the weights stay identical (checked by a hash).
#include <cstdint>
#include <span>
#include <string>

#include "retnet/core/param_buffer.h"
#include "retnet/dist/communicator.h"
#include "retnet/model/model.h"
#include "retnet/train/optimizer.h"

namespace retnet {

// FNV-1a of a buffer's floats.
uint64_t buffer_hash(const ParamBuffer& buffer);

// At the start of a run: every rank must have the same settings (run_json and config), data and
// initial weights as rank 0. Throws Error on every rank, naming what differs and on which ranks.
void check_same_run(Communicator& comm, const std::string& settings, std::span<const int32_t> train,
                    std::span<const int32_t> val, const ParamBuffer& params);

// Every `--hash-interval` steps: throws Error on every rank naming the step when any rank's
// weights differ from rank 0's.
void check_same_weights(Communicator& comm, const ParamBuffer& params, int64_t step);

// grads = the mean over ranks of grads (a sum all-reduce, then 1/N).
void average_gradients(Communicator& comm, ParamBuffer& grads);

// Rank 0's parameters, AdamW moments, step and schedule length to every rank (resume: only rank 0
// reads the checkpoint, so the ranks need no shared file system).
void broadcast_training_state(Communicator& comm, Model& model, AdamW& optimizer, int64_t& step,
                              int64_t& total);

}  // namespace retnet
