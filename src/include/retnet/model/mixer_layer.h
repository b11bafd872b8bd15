#pragma once
// Internal (src/include): the token-mixer sub-layer of a block, between the input projection and
// the output projection, for every mixer of mixer.h. The layer loop (layer_forward.cpp and
// layer_backward.cpp) runs
//   xn = norm(x);  proj = xn [q | k | v (| g)]^T;  out = mixer(proj);  x += out out_proj^T
// and each mixer implements the middle step, forward and backward, in its own file.
#include <array>
#include <cstdint>

#include "retnet/core/arena.h"
#include "retnet/core/param_buffer.h"
#include "retnet/core/tensor.h"
#include "retnet/model/forward.h"
#include "retnet/model/model.h"
#include "retnet/model/slice_link.h"

namespace retnet::detail {

// One layer's forward call over B x T tokens.
struct MixerPass {
  const Model* model = nullptr;
  int64_t layer = 0;
  int64_t B = 0, T = 0;
  Form form = Form::Parallel;
  int64_t chunk = 64, scan_tile = 0;
  float* proj = nullptr;   // [N, P]; mixers may transform it in place (rotation, key scale)
  float* out = nullptr;    // [N, vd] scratch the output may be written to
  float* saved = nullptr;  // training: this layer's saved_floats(B, T) floats; else nullptr
  // The layer's constant-size state of the first sequence (sequences state_stride apart), or
  // nullptr (parallel form).
  float* state = nullptr;
  int64_t state_stride = 0;
  // A decode step over some of a session's sequences: the row of the state and of the cache that
  // sequence b is in (`first` is then 0); nullptr: rows first .. first + B - 1.
  const int64_t* rows = nullptr;
  // Mixers with a cache: the cache and the index of the call's first sequence in it, or nullptr
  // (training: from an empty sequence).
  TokenCache* cache = nullptr;
  int64_t cache_layer = 0;  // the layer's index among the layers with a cache
  int64_t first = 0;
  const int64_t* positions = nullptr;  // [B] tokens consumed before this call; nullptr: all 0
  // The pass's rotation table (rotation_table, filled once for all layers; nullptr when the
  // mixer does not rotate) and its row stride between sequences.
  const float* rotation = nullptr;
  int64_t rotation_stride = 0;
  // Sequence parallel training: the pass is one slice of longer sequences (positions: where it
  // starts), and the mixer's chunkwise form starts from the state the link returns for its
  // summary; nullptr: whole sequences.
  SliceLink* link = nullptr;
};

// Sequence parallel, for a mixer whose state passes through a slice undecayed (the linear
// mixers): the pass's state (`floats` per sequence for this layer) holds each sequence's summary;
// through the link (decays 1) it becomes the state entering the slice, in place.
void enter_slice_from_state(const MixerPass& p, int64_t floats, Arena& arena);

// Rotates the queries and keys of a pass ([N, H, dk] rows `ld` floats apart) in place, by the
// pass's table; the keys have Hk heads (-1: H).
void rotate_queries_keys(const MixerPass& p, float* q, float* k, int64_t ld, int64_t H, int64_t dk,
                         int64_t Hk = -1);

// One layer's backward call (training: parallel or chunkwise, from an empty state, or with a link
// from the state the forward's link returned, sending that state's gradient back through it).
struct MixerGrad {
  const Model* model = nullptr;
  int64_t layer = 0;
  int64_t B = 0, T = 0;
  Form form = Form::Parallel;
  int64_t chunk = 64;
  const float* proj = nullptr;      // [N, P] as the forward left it
  const float* saved = nullptr;     // what the forward saved
  const float* rotation = nullptr;  // the forward's rotation table (positions from 0: T rows)
  const float* d_out = nullptr;     // [N, vd]
  float* d_proj = nullptr;          // [N, P], overwritten
  ParamBuffer* grads = nullptr;     // accumulates the mixer's own tensors' gradients
  SliceLink* link = nullptr;        // as the forward's MixerPass::link
};

// The backward of rotate_queries_keys: rotates the queries' and keys' gradients back in place by
// the forward's table (the keys' Hk heads, -1: H).
void rotate_back_query_key_grads(const MixerGrad& g, float* d_q, float* d_k, int64_t ld, int64_t H,
                                 int64_t dk, int64_t Hk = -1);

class LayerMixer {
 public:
  virtual ~LayerMixer() = default;
  // Floats one layer saves for the backward pass.
  virtual size_t saved_floats(const Config& c, int64_t B, int64_t T) const = 0;
  // Arena floats of a forward call (B x T tokens, `form`) and of a backward call.
  virtual size_t workspace_floats(const Config& c, Form form, int64_t B, int64_t T,
                                  int64_t chunk, int64_t scan_tile) const = 0;
  virtual size_t backward_workspace_floats(const Config& c, Form form, int64_t B,
                                           int64_t T, int64_t chunk) const = 0;
  // Runs the mixer; returns where its output [N, vd] is (pass.out or a saved buffer).
  virtual const float* forward(const MixerPass& pass, Arena& arena) const = 0;
  // The forward's output again, for the output projection's weight gradient: from the saved
  // buffer, or recomputed into `scratch` [N, vd].
  virtual const float* output(const MixerGrad& grad, float* scratch) const = 0;
  virtual void backward(const MixerGrad& grad, Arena& arena) const = 0;
  // Whether forward and backward accept a SliceLink (sequence parallel training).
  virtual bool joins_slices() const { return false; }
};

// The block of a (single-mixer or layer) config's mixer.
inline const LayerMixer& layer_mixer(const Config& c) { return c.mixer->block(); }

// Each mixer's spec, defined in its folder (src/mixers/<name>/); the registry
// (src/model/mixer_registry.cpp) lists them.
const MixerSpec& retention_mixer_spec();
const MixerSpec& attention_mixer_spec();
const MixerSpec& linear_mixer_spec();     // linear transformer (elu + 1 features)
const MixerSpec& performer_mixer_spec();  // FAVOR+ features
const MixerSpec& aft_mixer_spec();        // AFT-full
const MixerSpec& aft_simple_mixer_spec();
const MixerSpec& rwkv_mixer_spec();

// The one instance of a block class, for its spec's `block`.
template <class Block>
const LayerMixer& block_instance() {
  static const Block block;
  return block;
}

// Helpers shared by the mixers.
TensorView head_view(float* p, int64_t B, int64_t T, int64_t H, int64_t ld, int64_t last);
inline TensorView head_view(const float* p, int64_t B, int64_t T, int64_t H, int64_t ld,
                            int64_t last) {
  return head_view(const_cast<float*>(p), B, T, H, ld, last);
}
// A [B, T, C] view of rows `ld` floats apart: the channel-wise mixers' q, k, v and outputs.
TensorView channel_view(const float* p, int64_t B, int64_t T, int64_t ld, int64_t C);
// out[n, :] = sigmoid(gate[n, :]) * x[n, :] over N rows of C ([N, ldg] gate, contiguous x, out):
// the channel-wise mixers' output, recomputed for the output projection's weight gradient.
void sigmoid_gated(const float* gate, int64_t ldg, const float* x, float* out, int64_t N,
                   int64_t C);
// The cache kernels advance their own per-sequence lengths: a copy of the pass's positions (0
// without them) in the arena, one per layer.
int64_t* cache_lengths(Arena& arena, const int64_t* positions, int64_t B);
inline size_t cache_lengths_floats(int64_t B) {
  return Arena::footprint(static_cast<size_t>(2 * B));
}

// Carves consecutive 64-byte-aligned regions out of a saved buffer (sizes via Arena::footprint).
class SavedCarver {
 public:
  explicit SavedCarver(float* base) : p_(base) {}
  float* take(size_t floats) {
    float* r = p_;
    p_ += Arena::footprint(floats);
    return r;
  }

 private:
  float* p_;
};

// A layer's saved buffer as K regions of the given sizes in floats, in order: a mixer lists them
// once, and its saved_floats() (saved_footprint) and its carve (carve_saved) both follow the list.
template <size_t K>
using SavedSizes = std::array<size_t, K>;

template <size_t K>
size_t saved_footprint(const SavedSizes<K>& sizes) {
  size_t floats = 0;
  for (size_t n : sizes) floats += Arena::footprint(n);
  return floats;
}

// Where each region starts in `base`.
template <size_t K>
std::array<float*, K> carve_saved(float* base, const SavedSizes<K>& sizes) {
  SavedCarver carver(base);
  std::array<float*, K> regions;
  for (size_t i = 0; i < K; ++i) regions[i] = carver.take(sizes[i]);
  return regions;
}
// The backward reads what the forward saved through the same carve.
template <size_t K>
std::array<float*, K> carve_saved(const float* base, const SavedSizes<K>& sizes) {
  return carve_saved(const_cast<float*>(base), sizes);
}

// A mixer whose saved buffer is the regions `sizes(c, N)` lists for N = B * T tokens.
template <auto sizes>
class SavedRegionsMixer : public LayerMixer {
 public:
  size_t saved_floats(const Config& c, int64_t B, int64_t T) const override {
    return saved_footprint(sizes(c, B * T));
  }
};

// The q (or r), k and v of a projection row, as [B, T, C] views: a channel-wise mixer's
// projection [N, 3 C] (q | k | v), or its gradient.
struct ChannelQkv {
  TensorView q, k, v;
};
ChannelQkv channel_qkv(const float* proj, int64_t B, int64_t T, int64_t C);

// The q, k [B, T, H, d_k] and v [B, T, H, d_v] of the config's projection rows [N, P]
// (q | k | v ...), or of their gradient.
struct HeadQkv {
  TensorView q, k, v;
};
HeadQkv head_qkv(const float* proj, int64_t B, int64_t T, const Config& c);

// A head mixer's output rows [N, vd] (or their gradient) as a [B, T, H, d_v] view.
TensorView head_output_view(const float* out, int64_t B, int64_t T, const Config& c);

// A channel-wise mixer's output sigmoid(q) * x (q the first vd of each projection row, x [N, vd]),
// recomputed into `scratch` [N, vd] for the output projection's weight gradient; returns scratch.
const float* sigmoid_gated_output(const MixerGrad& g, const float* x, float* scratch);

// Zeroes the gradient of the projection rows, [N, P], before a kernel accumulates into it.
void zero_projection_grad(const MixerGrad& g, int64_t P);

// A channel-wise mixer's backward operands as [B, T, C] views: q (or r), k, v of the projection
// and of its gradient, which this zeroes first, and the gradient of the mixer's output.
struct ChannelGrad {
  ChannelQkv x, dx;
  TensorView d_out;
};
ChannelGrad channel_grad(const MixerGrad& g, int64_t C);

// Earlier tokens a token attends to, on average over T tokens: T / 2 in the parallel form
// (training and prefill), T for a step.
inline double mean_context(int64_t T, Form form) {
  return form == Form::Parallel ? static_cast<double>(T) / 2.0 : T;
}

// The key/value cache of a pass's sequences (AftCache, AttentionCache): the layer's blocks of the
// pass's cache, with lengths from the pass's positions in the arena.
template <class Cache>
Cache pass_cache(const MixerPass& p, Arena& arena) {
  Cache cache;
  cache.data = p.cache->block(p.cache_layer, p.first);
  cache.capacity = p.cache->capacity;
  cache.length = cache_lengths(arena, p.positions, p.B);
  cache.rows = p.rows;
  return cache;
}

// Whether a pass with a cache is one decode step (else a prefill of T tokens).
inline bool is_decode_step(const MixerPass& p) { return p.form == Form::Recurrent && p.T == 1; }

}  // namespace retnet::detail
