// Run under `mpirun -np N`: sequence parallel training over the MPI ranks against one process
// over the whole sequences. For each model given on the command line (retention,
// retention-unnormalised, or another mixer's name), the ranks' summed loss and every tensor's
// summed gradient must equal the whole pass's (1e-5 relative to the tensor's largest gradient).
// T = 37 is a multiple neither of the chunk (8) nor of 2 or 3 ranks. Exits 0 when all agree, 1
// naming every mismatch.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "../../src/train/sequence_parallel.h"
#include "retnet/core/error.h"
#include "retnet/dist/communicator.h"
#include "retnet/model/mixer.h"
#include "retnet/model/training.h"

using namespace retnet;

namespace {

constexpr double kTolerance = 1e-5;

Config model_config(const std::string& name) {
  Config c;
  c.embed_dim = 16, c.value_embed_dim = 24, c.heads = 2, c.ffn_dim = 20, c.layers = 2;
  c.vocab_size = 30;
  c.layernorm_eps = 1e-6;
  if (name == "retention-unnormalised")
    c.normalize_scores = false;
  else if (name != "retention")
    c.mixer = &find_mixer(name);
  return c;
}

// max |got - want| / max |want| (NaN or Inf: infinity).
double relative_error(const float* got, const float* want, size_t n) {
  double top = 0, err = 0;
  for (size_t i = 0; i < n; ++i) {
    if (!std::isfinite(got[i]) || !std::isfinite(want[i])) return INFINITY;
    top = std::max(top, std::fabs(double(want[i])));
    err = std::max(err, std::fabs(double(got[i]) - double(want[i])));
  }
  return top == 0 ? err : err / top;
}

int check(Communicator& comm, const std::string& name) {
  const Config c = model_config(name);
  const Model m = Model::init(c, 11);
  const int64_t B = 2, T = 37, chunk = 8;
  std::vector<int32_t> tokens(B * T), targets(B * T);
  for (int64_t i = 0; i < B * T; ++i) {
    tokens[i] = static_cast<int32_t>((i * 7 + 3) % c.vocab_size);
    targets[i] = static_cast<int32_t>((i * 11 + 1) % c.vocab_size);
  }
  Arena arena;
  ParamBuffer grads(m.params().layout());
  double loss = sequence_parallel_loss_and_gradients(comm, m, tokens.data(), targets.data(), B, T,
                                                     chunk, arena, &grads);
  comm.all_reduce_sum(&loss, 1);
  comm.all_reduce_sum(grads.data(), grads.size());
  if (comm.rank() != 0) return 0;
  ParamBuffer whole(m.params().layout());
  TrainingOptions o;
  o.form = Form::Chunkwise;
  o.chunk = chunk;
  const double want = loss_and_gradients(m, tokens.data(), targets.data(), B, T, o, arena, &whole);
  int bad = 0;
  const double loss_err = std::fabs(loss - want) / std::fabs(want);
  std::printf("%s, %d ranks: loss %.9f vs %.9f (relative %.2e)\n", name.c_str(), comm.size(),
              loss, want, loss_err);
  if (!(loss_err <= kTolerance)) ++bad;
  double worst = 0;
  for (const ParamEntry& e : m.params().layout().entries()) {
    const double err = relative_error(grads.data() + e.offset, whole.data() + e.offset, e.numel);
    worst = std::max(worst, err);
    if (!(err <= kTolerance)) {
      std::printf("  MISMATCH %s: gradient relative error %.2e\n", e.name.c_str(), err);
      ++bad;
    }
  }
  std::printf("  %zu gradient tensors, largest relative error %.2e\n",
              m.params().layout().size(), worst);
  return bad;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    Communicator& comm = world();
    comm.set_timeout(60);
    int bad = 0;
    for (int i = 1; i < argc; ++i) bad += check(comm, argv[i]);
    if (comm.rank() == 0) std::printf(bad ? "FAILED: %d mismatches\n" : "all equal\n", bad);
    return bad ? 1 : 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
