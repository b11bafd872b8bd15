// The block of the channel-wise decay-attention mixers (rwkv/rwkv_spec.cpp and
// aft_simple/aft_simple_spec.cpp), one kernel (mixers/decay_attention.h):
//   rwkv:       out = sigmoid(r) * wkv(k, v; w = exp(time_decay), u = time_first)
//   aft-simple: out = sigmoid(q) * running average of v weighted by exp(k)   (w = u = 0)
// Projections r (or q) | k | v, each of width vd; a constant-size state of 3 x vd per layer.
#include "shared_blocks.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "retnet/core/error.h"
#include "retnet/mixers/decay_attention.h"
#include "retnet/model/mixer_layer.h"

namespace retnet::detail {
namespace {

// RWKV's own tensors, in its spec's order (aft-simple has none).
constexpr size_t kTimeDecay = 0;  // time_decay [vd]: decay rate exp(time_decay)
constexpr size_t kTimeFirst = 1;  // time_first [vd]: the current token's bonus

bool learns_decay(const Config& c) { return c.mixer == &rwkv_mixer_spec(); }

// w and u of a layer into `wu` [2, vd]: rwkv's decay rate exp(time_decay) and bonus; zeros for
// aft-simple.
void decay_parameters(const Model& m, int64_t layer, float* wu) {
  const Config& c = m.layer_config(layer);
  const int64_t vd = c.value_embed_dim;
  if (!learns_decay(c)) {
    std::memset(wu, 0, static_cast<size_t>(2 * vd) * sizeof(float));
    return;
  }
  const LayerTensors& L = m.tensors().layers[layer];
  const float* decay = m.param(L.mixer_tensors[kTimeDecay]);
  const float* first = m.param(L.mixer_tensors[kTimeFirst]);
  for (int64_t i = 0; i < vd; ++i) {
    wu[i] = std::exp(decay[i]);
    wu[vd + i] = first[i];
  }
}

// Saved per token and channel: wkv (the gate's input) and the log denominator, in this order.
SavedSizes<2> saved_sizes(const Config& c, int64_t N) {
  const size_t n = static_cast<size_t>(N * c.value_embed_dim);
  return {n, n};
}
struct Saved {
  float *wkv, *log_den;
};
Saved carve(const float* base, const Config& c, int64_t N) {
  const auto [wkv, log_den] = carve_saved(base, saved_sizes(c, N));
  return {wkv, log_den};
}

// Sequence parallel: a slice record per sequence ([4][vd]: sums, exponent, log decay) and the
// empty records, in the arena.
size_t slice_records_floats(const Config& c, int64_t B) {
  return Arena::footprint(static_cast<size_t>(B * kDecaySliceRecordRows * c.value_embed_dim));
}

// The records of a pass's B sequences, joined by the decay mixer's combine rule.
struct SliceRecords {
  float* records;
  float* empty;
  size_t floats;
  SliceLink::Combine combine;
};

SliceRecords slice_records(int64_t B, int64_t vd, Arena& arena) {
  const int64_t stride = kDecaySliceRecordRows * vd;
  SliceRecords r;
  r.floats = static_cast<size_t>(B * stride);
  r.records = arena.alloc(r.floats);
  r.empty = arena.alloc(r.floats);
  decay_attention_empty_records(r.empty, B, vd, stride);
  r.combine = [B, vd, stride](float* acc, const float* x) {
    decay_attention_combine_records(acc, x, B, vd, stride);
  };
  return r;
}

class DecayMixer final : public SavedRegionsMixer<saved_sizes> {
 public:
  size_t workspace_floats(const Config& c, Form form, int64_t B, int64_t T, int64_t chunk,
                          int64_t) const override {
    return Arena::footprint(static_cast<size_t>(2 * c.value_embed_dim)) +
           decay_attention_workspace_floats(form, B, T, c.value_embed_dim, chunk) +
           (form == Form::Chunkwise ? 2 * slice_records_floats(c, B) : 0);
  }

  size_t backward_workspace_floats(const Config& c, Form form, int64_t B, int64_t T,
                                   int64_t chunk) const override {
    return 2 * Arena::footprint(static_cast<size_t>(2 * c.value_embed_dim)) +
           decay_attention_backward_workspace_floats(form, B, T, c.value_embed_dim,
                                                     chunk) +
           (form == Form::Chunkwise ? 2 * slice_records_floats(c, B) : 0);
  }

  const float* forward(const MixerPass& p, Arena& arena) const override {
    const Config& c = p.model->layer_config(p.layer);
    const int64_t B = p.B, T = p.T, vd = c.value_embed_dim;
    float* wu = arena.alloc(static_cast<size_t>(2 * vd));
    decay_parameters(*p.model, p.layer, wu);
    const ChannelQkv x = channel_qkv(p.proj, B, T, vd);
    DecayAttentionArgs a;
    a.r = x.q, a.k = x.k, a.v = x.v;
    a.out = channel_view(p.out, B, T, vd, vd);
    a.w = wu, a.u = wu + vd;
    a.state = p.state, a.state_stride = p.state_stride, a.rows = p.rows;
    a.chunk = p.chunk;
    if (p.link) {
      // This slice's record through the link: the state the earlier slices leave, to start from.
      const SliceRecords r = slice_records(B, vd, arena);
      const int64_t stride = kDecaySliceRecordRows * vd;
      decay_attention_slice_record(x.k, x.v, a.w, r.records, stride);
      p.link->enter(p.layer, r.records, r.floats, r.empty, r.combine);
      for (int64_t b = 0; b < B; ++b)
        std::memcpy(p.state + b * p.state_stride, r.records + b * stride,
                    static_cast<size_t>(decay_attention_state_floats(vd)) * sizeof(float));
    }
    if (p.saved) {
      const Saved sv = carve(p.saved, c, B * T);
      a.saved_wkv = sv.wkv, a.saved_log_denominators = sv.log_den;
    }
    decay_attention_forward(p.form, a, arena);
    return p.out;
  }

  const float* output(const MixerGrad& gr, float* scratch) const override {
    return sigmoid_gated_output(gr, carve(gr.saved, gr.model->layer_config(gr.layer), gr.B * gr.T).wkv, scratch);
  }

  void backward(const MixerGrad& gr, Arena& arena) const override {
    const Model& model = *gr.model;
    const Config& c = model.layer_config(gr.layer);
    const int64_t B = gr.B, T = gr.T, vd = c.value_embed_dim;
    const Saved sv = carve(gr.saved, c, B * T);
    float* wu = arena.alloc(static_cast<size_t>(2 * vd));
    float* dwu = arena.alloc(static_cast<size_t>(2 * vd));
    decay_parameters(model, gr.layer, wu);
    std::memset(dwu, 0, static_cast<size_t>(2 * vd) * sizeof(float));
    const ChannelGrad g = channel_grad(gr, vd);
    DecayAttentionGradArgs ga;
    ga.r = g.x.q, ga.k = g.x.k, ga.v = g.x.v;
    ga.d_r = g.dx.q, ga.d_k = g.dx.k, ga.d_v = g.dx.v;
    ga.d_out = g.d_out;
    ga.w = wu, ga.u = wu + vd, ga.d_w = dwu, ga.d_u = dwu + vd;
    ga.wkv = sv.wkv, ga.log_denominators = sv.log_den;
    ga.chunk = gr.chunk;
    if (gr.link) {
      // The start state's gradient goes back to the earlier slices; the later slices' gradient of
      // the state this slice leaves comes in, with its log decay over this slice, -T w.
      const SliceRecords r = slice_records(B, vd, arena);
      const int64_t stride = kDecaySliceRecordRows * vd;
      ga.start_state = gr.link->entered(gr.layer, r.floats);
      ga.d_start_state = r.records;
      ga.state_stride = stride;
      // Called inside decay_attention_backward: everything by value but gr.
      ga.leave_slice = [&gr, r, wu, stride, B, T, vd] {
        for (int64_t b = 0; b < B; ++b)
          for (int64_t i = 0; i < vd; ++i)
            r.records[b * stride + 3 * vd + i] = -static_cast<float>(T) * wu[i];
        gr.link->leave_gradient(gr.layer, r.records, r.floats, r.empty, r.combine);
      };
    }
    decay_attention_backward(gr.form, ga, arena);
    if (learns_decay(c) && gr.grads) {
      const LayerTensors& L = model.tensors().layers[gr.layer];
      float* g_decay = gr.grads->tensor(L.mixer_tensors[kTimeDecay]);
      float* g_first = gr.grads->tensor(L.mixer_tensors[kTimeFirst]);
      for (int64_t i = 0; i < vd; ++i) {
        g_decay[i] += dwu[i] * wu[i];  // w = exp(time_decay)
        g_first[i] += dwu[vd + i];
      }
    }
  }

  bool joins_slices() const override { return true; }
};

}  // namespace

// Per channel: the running numerator, denominator and maximum exponent.
int64_t decay_state_floats(const Config& c) { return 3 * c.value_embed_dim; }

// Per channel and earlier token in a chunk (or the sequence): an exponential and multiply-adds;
// a recurrent step updates the running sums.
double decay_core_flops(const Config& c, int64_t T, Form form, int64_t chunk) {
  const double vd = static_cast<double>(c.value_embed_dim), step = 10.0 * vd;
  switch (form) {
    case Form::Parallel:
      return 4.0 * (static_cast<double>(T) / 2.0) * vd;
    case Form::Chunkwise:
      return 4.0 * (static_cast<double>(std::min(chunk, T)) / 2.0) * vd + step;
    case Form::Recurrent:
    case Form::Scan:
      return step;
  }
  return 0;
}

const LayerMixer& decay_block() { return block_instance<DecayMixer>(); }

}  // namespace retnet::detail
