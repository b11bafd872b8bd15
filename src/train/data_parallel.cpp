#include "data_parallel.h"

#include <vector>

#include "retnet/core/error.h"
#include "retnet/core/hash.h"

namespace retnet {
namespace {

// The ranks whose value differs from rank 0's, as "1, 3"; empty when none. Collective.
std::string ranks_differing(Communicator& comm, uint64_t mine) {
  std::vector<uint64_t> all(static_cast<size_t>(comm.size()));
  comm.all_gather(&mine, all.data(), sizeof mine);
  std::string list;
  for (size_t r = 1; r < all.size(); ++r)
    if (all[r] != all[0]) list += (list.empty() ? "" : ", ") + std::to_string(r);
  return list;
}

}  // namespace

uint64_t buffer_hash(const ParamBuffer& buffer) {
  return fnv1a(buffer.data(), buffer.size() * sizeof(float));
}

void check_same_run(Communicator& comm, const std::string& settings, std::span<const int32_t> train,
                    std::span<const int32_t> val, const ParamBuffer& params) {
  const std::string s = ranks_differing(comm, fnv1a(settings.data(), settings.size()));
  RETNET_CHECK(s.empty(),
               "rank(s) {} run with other settings or model config than rank 0 (this rank: {}); "
               "give every rank the same command line and files",
               s, settings);
  const uint64_t data =
      fnv1a(val.data(), val.size_bytes(), fnv1a(train.data(), train.size_bytes()));
  const std::string d = ranks_differing(comm, data);
  RETNET_CHECK(d.empty(),
               "rank(s) {} read other training data than rank 0 ({} training and {} validation "
               "tokens here); every rank needs the same --data file",
               d, train.size(), val.size());
  const std::string w = ranks_differing(comm, buffer_hash(params));
  RETNET_CHECK(w.empty(), "rank(s) {} start from other weights than rank 0", w);
}

void check_same_weights(Communicator& comm, const ParamBuffer& params, int64_t step) {
  const std::string w = ranks_differing(comm, buffer_hash(params));
  RETNET_CHECK(w.empty(),
               "after step {} the weights of rank(s) {} differ from rank 0's: the ranks have "
               "diverged",
               step, w);
}

void average_gradients(Communicator& comm, ParamBuffer& grads) {
  if (comm.size() == 1) return;
  comm.all_reduce_sum(grads.data(), grads.size());
  const float s = 1.f / static_cast<float>(comm.size());
  for (size_t i = 0; i < grads.size(); ++i) grads.data()[i] *= s;
}

void broadcast_training_state(Communicator& comm, Model& model, AdamW& optimizer, int64_t& step,
                              int64_t& total) {
  if (comm.size() == 1) return;
  for (ParamBuffer* b : {&model.params(), &optimizer.first_moment(), &optimizer.second_moment()})
    comm.broadcast(b->data(), b->size() * sizeof(float), 0);
  int64_t counters[2] = {step, total};
  comm.broadcast(counters, sizeof counters, 0);
  step = counters[0];
  total = counters[1];
  optimizer.set_steps_taken(step);
}

}  // namespace retnet
