// What the reference backend's mixers share (reference_mixers.h): the rotation of a token's
// queries and keys, and a sequence's cached tokens.
#include <cmath>
#include <cstring>

#include "reference_mixers.h"
#include "retnet/model/state.h"

namespace retnet::detail::reference {

void rotate(const MixerPass& p, double* x, int64_t heads, int64_t dk, int64_t b, int64_t t) {
  RETNET_CHECK(p.rotation != nullptr,
               "layer {} rotates its queries and keys but the pass has "
               "no rotation table",
               p.layer);
  const int64_t half = dk / 2;
  RETNET_CHECK(2 * static_cast<int64_t>(p.model->layer_thetas(p.layer).size()) == dk,
               "layer {}'s rotation table has {} angles per row, its heads {} dims", p.layer,
               p.model->layer_thetas(p.layer).size(), dk);
  const float* row = p.rotation + (b * p.rotation_stride + t) * dk;
  // torchscale's neighbours (x[2i], x[2i + 1]) or GPT-NeoX's halves (x[i], x[i + dk / 2]).
  const bool halves = p.model->config().rotary == RotaryStyle::HalfSplit;
  const int64_t step = halves ? 1 : 2, offset = halves ? half : 1;
  for (int64_t h = 0; h < heads; ++h) {
    double* y = x + h * dk;
    for (int64_t i = 0; i < half; ++i) {
      const double c = row[i], s = row[half + i];
      const double a = y[step * i], e = y[step * i + offset];
      y[step * i] = a * c - e * s;
      y[step * i + offset] = e * c + a * s;
    }
  }
}

SequenceTokens::SequenceTokens(const MixerPass& p, int64_t b, int64_t row_floats)
    : row_floats_(row_floats) {
  // Without a cache the pass runs from empty sequences: its own tokens are all there is.
  if (p.cache) {
    const TokenCache& cache = *p.cache;
    RETNET_CHECK(cache.row_floats[p.cache_layer] == row_floats,
                 "layer {}'s cache rows hold {} floats, its tokens {}", p.layer,
                 cache.row_floats[p.cache_layer], row_floats);
    past_ = start_position(p, b);
    RETNET_CHECK(past_ >= 0 && past_ + p.T <= cache.capacity,
                 "sequence {} holds {} tokens and gets {} more, past the cache's capacity of {}", b,
                 past_, p.T, cache.capacity);
    cache_ = p.cache->block(p.cache_layer, p.first) +
             sequence_row(p.rows, b) * cache.capacity * row_floats;
  }
  rows_.resize(static_cast<size_t>((past_ + p.T) * row_floats));
  if (cache_)
    std::memcpy(rows_.data(), cache_, static_cast<size_t>(past_ * row_floats) * sizeof(float));
}

void SequenceTokens::set(int64_t t, const std::vector<float>& row) {
  const int64_t at = (past_ + t) * row_floats_;
  std::memcpy(rows_.data() + at, row.data(), static_cast<size_t>(row_floats_) * sizeof(float));
  if (cache_)
    std::memcpy(cache_ + at, row.data(), static_cast<size_t>(row_floats_) * sizeof(float));
}

}  // namespace retnet::detail::reference
