// Keeping a prefix of a checking pass's tokens (speculative decoding's rollback): each
// constant-state layer's state after the first j tokens, from the state before the pass and what
// the pass recorded (CheckLog). For retention that is the closed form
//   S_j = gamma^j S_0 + sum_{i<j} gamma^(j-1-i) k_i v_i^T
// which is one chunk of the chunkwise form over the recorded rows; the other constant-state mixers
// (linear, Performer, AFT-simple, RWKV) have the same shape with their own decays and features.
// No weight is read again and no per-token state is stored: the cost is one pass over the state
// plus the mixer's work on j tokens.
#include <algorithm>
#include <cstring>

#include "layer_loop.h"
#include "retnet/backend/backend.h"
#include "retnet/core/error.h"
#include "retnet/model/forward.h"
#include "retnet/model/mixer_layer.h"

namespace retnet {

namespace {

bool has_constant_state(const Config& layer) { return layer.mixer->state_floats_per_layer != nullptr; }

}  // namespace

size_t rewind_workspace_floats(const Model& model, int64_t tokens) {
  size_t most = 0;
  for (int64_t l = 0; l < model.config().layers; ++l) {
    const Config& lc = model.layer_config(l);
    if (!has_constant_state(lc)) continue;
    const size_t rows = Arena::footprint(static_cast<size_t>(tokens * lc.projection_width())) +
                        Arena::footprint(static_cast<size_t>(tokens * lc.value_embed_dim)) +
                        Arena::footprint(static_cast<size_t>(tokens * lc.max_key_dim()));
    most = std::max(most, rows + detail::layer_mixer(lc).workspace_floats(
                                     lc, Form::Chunkwise, 1, tokens, tokens, 0));
  }
  return most;
}

void rewind_checked_state(const Model& model, const CheckLog& log, int64_t kept, float* state,
                          Arena& arena) {
  RETNET_CHECK(kept >= 1 && kept <= log.tokens, "keeping {} of {} checked tokens", kept,
               log.tokens);
  const int64_t S = model.config().state_floats_per_sequence();
  std::memcpy(state, log.start_state.data(), static_cast<size_t>(S) * sizeof(float));
  const detail::Backend& be = model.backend();
  for (int64_t l = 0; l < model.config().layers; ++l) {
    const Config& lc = model.layer_config(l);
    if (!has_constant_state(lc)) continue;
    const size_t i = static_cast<size_t>(l);
    const int64_t P = lc.projection_width();
    const size_t mark = arena.used();
    // The mixers transform their rows in place: they run on a copy, so that another prefix can
    // be taken from the same record.
    float* proj = arena.alloc(static_cast<size_t>(kept * P));
    std::memcpy(proj, log.proj[i].data(), static_cast<size_t>(kept * P) * sizeof(float));
    detail::MixerPass pass{.model = &model, .layer = l, .B = 1, .T = kept,
                           .form = Form::Chunkwise, .chunk = kept, .proj = proj,
                           .out = arena.alloc(static_cast<size_t>(kept * lc.value_embed_dim))};
    pass.state = state + model.state_offset(l);
    pass.state_stride = S;
    pass.positions = &log.start;
    if (lc.mixer->rotates) {  // the kept tokens' rows, as the pass computed them
      float* table = arena.alloc(static_cast<size_t>(kept * lc.max_key_dim()));
      pass.rotation_stride = be.rotation_table(model.layer_thetas(l), 1, kept, &log.start, table);
      pass.rotation = table;
    }
    be.mixer_forward(detail::layer_mixer(lc), pass, arena);  // its output is not needed
    arena.rewind(mark);
  }
}

}  // namespace retnet
