// Channel-wise decay attention (RWKV-4's WKV, AFT-simple) in three forms; see
// src/include/retnet/mixers/decay_attention.h for the definition they share.
#include "retnet/mixers/decay_attention.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "decay_kernels.h"
#include "decay_lanes.h"
#include "retnet/core/error.h"

namespace retnet {
namespace {

using detail::kCb;

using Dims = detail::ChannelDims;

Dims check_args(Form form, const DecayAttentionArgs& a) {
  const Dims d = detail::channel_dims(a.k, "decay attention");
  detail::check_channel_views(d, {{&a.r, "r"}, {&a.k, "k"}, {&a.v, "v"}, {&a.out, "out"}});
  RETNET_CHECK(a.w != nullptr && a.u != nullptr, "decay attention needs the decay w and bonus u");
  RETNET_CHECK(form != Form::Scan, "decay attention has no scan form");
  RETNET_CHECK(form == Form::Parallel || a.state != nullptr,
               "decay attention: the {} form needs a state buffer",
               form_name(form));
  RETNET_CHECK(a.chunk >= 1, "decay attention: chunk size must be at least 1, got {}", a.chunk);
  RETNET_CHECK(
      a.state == nullptr || d.B == 1 || a.state_stride >= decay_attention_state_floats(d.C),
      "decay attention: state stride {} is below the {} floats of one sequence's state",
      a.state_stride, decay_attention_state_floats(d.C));
  RETNET_CHECK((a.saved_wkv == nullptr) == (a.saved_log_denominators == nullptr),
               "decay attention: save both wkv and the log denominators, or neither");
  return d;
}

// Where task (b, c0, nc) writes its tokens' outputs (decay_lanes.h).
DecayRows row_sink(const DecayAttentionArgs& a, const Dims& d, int64_t b, int64_t c0, int64_t nc) {
  const int64_t saved = b * d.T * d.C + c0;
  return {&a.r.at(b, 0, c0),
          a.r.stride[1],
          &a.out.at(b, 0, c0),
          a.out.stride[1],
          a.saved_wkv ? a.saved_wkv + saved : nullptr,
          a.saved_log_denominators ? a.saved_log_denominators + saved : nullptr,
          d.C,
          nc};
}

size_t pairwise_scratch(int64_t L) { return 2 * L * kCb; }

// Parallel (one chunk of T tokens from an empty state, nothing kept) and chunkwise.
void pairwise_block(const DecayAttentionArgs& args, const Dims& d, int64_t b, int64_t c0,
                    int64_t nc, int64_t chunk, bool with_state, float* scratch) {
  alignas(64) float w[kCb], u[kCb], a[kCb], bs[kCb], p[kCb];
  detail::pack_channels(args.w, c0, nc, w);
  detail::pack_channels(args.u, c0, nc, u);
  float* state = with_state ? args.state + sequence_row(args.rows, b) * args.state_stride : nullptr;
  for (int64_t c = 0; c < kCb; ++c) {
    const bool real = state && c < nc;
    a[c] = real ? state[c0 + c] : 0.f;
    bs[c] = real ? state[d.C + c0 + c] : 0.f;
    p[c] = real ? state[2 * d.C + c0 + c] : 0.f;
  }
  float* K = scratch;          // [chunk][kCb]
  float* V = K + chunk * kCb;  // [chunk][kCb]
  static const auto pairwise_chunk = RETNET_ISA_VARIANT(kernel_isa(), decay_pairwise_chunk);
  const DecayRows sink = row_sink(args, d, b, c0, nc);
  for (int64_t t0 = 0; t0 < d.T; t0 += chunk) {
    const int64_t L = std::min(chunk, d.T - t0);  // the last chunk may be short: no padding
    detail::pack_rows(args.k, b, t0, L, c0, nc, K);
    detail::pack_rows(args.v, b, t0, L, c0, nc, V);
    pairwise_chunk(sink, t0, L, K, V, w, u, a, bs, p, with_state);
  }
  if (!state) return;
  for (int64_t c = 0; c < nc; ++c) {
    state[c0 + c] = a[c];
    state[d.C + c0 + c] = bs[c];
    state[2 * d.C + c0 + c] = p[c];
  }
}

// ---- recurrent form: RWKV-4's numerically stable kernel, one token at a time -------------------
void recurrent_block(const DecayAttentionArgs& args, const Dims& d, int64_t b, int64_t c0,
                     int64_t nc) {
  // The block's state, w and u in padded local lanes (padding: empty state, zero inputs), so the
  // per-token loop has a fixed trip count and vectorises.
  float* state = args.state + sequence_row(args.rows, b) * args.state_stride;
  alignas(64) float w[kCb], u[kCb], a[kCb], bs[kCb], p[kCb];
  detail::pack_channels(args.w, c0, nc, w);
  detail::pack_channels(args.u, c0, nc, u);
  detail::pack_channels(state, c0, nc, a);
  detail::pack_channels(state + d.C, c0, nc, bs);
  detail::pack_channels(state + 2 * d.C, c0, nc, p);
  static const auto steps = RETNET_ISA_VARIANT(kernel_isa(), decay_recurrent_steps);
  steps(row_sink(args, d, b, c0, nc), d.T, &args.k.at(b, 0, c0), args.k.stride[1],
        &args.v.at(b, 0, c0), args.v.stride[1], w, u, a, bs, p);
  std::copy_n(a, nc, state + c0);
  std::copy_n(bs, nc, state + d.C + c0);
  std::copy_n(p, nc, state + 2 * d.C + c0);
}

size_t forward_scratch(Form form, int64_t T, int64_t chunk) {
  switch (form) {
    case Form::Parallel:
      return pairwise_scratch(T);
    case Form::Recurrent:
      return 0;
    case Form::Chunkwise:
      return pairwise_scratch(std::min(chunk, T));
    case Form::Scan:  // no scan form (decay_attention_forward refuses it)
      return 0;
  }
  return 0;
}

}  // namespace

size_t decay_attention_workspace_floats(Form form, int64_t B, int64_t T, int64_t C,
                                        int64_t chunk) {
  return detail::channel_loop_footprint(B, C,
                                        forward_scratch(form, T, std::max<int64_t>(chunk, 1)));
}

void decay_attention_forward(Form form, const DecayAttentionArgs& a, Arena& arena) {
  const Dims d = check_args(form, a);
  if (d.B * d.T * d.C == 0) return;
  const int64_t chunk = form == Form::Parallel ? d.T : std::min(a.chunk, d.T);
  detail::for_each_channel_block(d.B, d.C, arena, forward_scratch(form, d.T, chunk),
                                 [&](int64_t b, int64_t c0, int64_t nc, float* s) {
                                   switch (form) {
                                     case Form::Parallel:
                                       pairwise_block(a, d, b, c0, nc, d.T, false, s);
                                       break;
                                     case Form::Recurrent:
                                       recurrent_block(a, d, b, c0, nc);
                                       break;
                                     case Form::Chunkwise:
                                       pairwise_block(a, d, b, c0, nc, chunk, true, s);
                                       break;
                                     case Form::Scan:  // refused by check_args
                                       break;
                                   }
                                 });
}

void decay_attention_reference(const float* r, const float* k, const float* v, const float* w,
                               const float* u, double* out, int64_t T, int64_t C,
                               const double* state, double* end_state) {
  std::vector<double> x(T + 2), y(T + 2), z(T + 2);  // one row's exponents and values
  for (int64_t c = 0; c < C; ++c) {
    const bool has_state = state && state[C + c] > 0;
    for (int64_t n = 0; n < T; ++n) {
      int64_t terms = 0;
      if (has_state) {  // the state's sums a e^p, b e^p decayed over n tokens
        x[terms] = state[2 * C + c] - double(n) * w[c] + std::log(state[C + c]);
        y[terms++] = state[c] / state[C + c];
      }
      for (int64_t m = 0; m < n; ++m) {
        x[terms] = double(k[m * C + c]) - double(n - 1 - m) * w[c];
        y[terms++] = v[m * C + c];
      }
      x[terms] = double(u[c]) + k[n * C + c];
      y[terms++] = v[n * C + c];
      const double top = *std::max_element(x.begin(), x.begin() + terms);
      double num = 0, den = 0;
      for (int64_t i = 0; i < terms; ++i) {
        const double e = std::exp(x[i] - top);
        num += e * y[i];
        den += e;
      }
      out[n * C + c] = num / den / (1.0 + std::exp(-double(r[n * C + c])));
    }
    if (!end_state) continue;
    // The sums over everything seen, decayed to the last token: the state's (a, b) e^p and each
    // token's (v, 1) e^k, relative to their largest exponent.
    int64_t terms = 0;
    if (has_state) {
      x[terms] = state[2 * C + c] - double(T) * w[c];
      y[terms] = state[c];
      z[terms++] = state[C + c];
    }
    for (int64_t m = 0; m < T; ++m) {
      x[terms] = double(k[m * C + c]) - double(T - 1 - m) * w[c];
      y[terms] = v[m * C + c];
      z[terms++] = 1.0;
    }
    double a = 0, b = 0, top = 0;
    if (terms > 0) top = *std::max_element(x.begin(), x.begin() + terms);
    for (int64_t i = 0; i < terms; ++i) {
      const double e = std::exp(x[i] - top);
      a += e * y[i];
      b += e * z[i];
    }
    end_state[c] = a, end_state[C + c] = b, end_state[2 * C + c] = top;
  }
}

}  // namespace retnet
