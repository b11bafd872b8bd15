#include "retnet/model/state.h"

#include <algorithm>
#include <cstring>

#include "retnet/core/error.h"

namespace retnet {
namespace {

// memcpy of n floats; n may be 0 with null pointers (the mixers with only a cache have no
// constant state: an empty vector's data() is null, and memcpy from null is undefined even for 0).
void copy_floats(float* to, const float* from, int64_t n) {
  if (n > 0) std::memcpy(to, from, static_cast<size_t>(n) * sizeof(float));
}

}  // namespace

State::State(const Config& config, int64_t b)
    : batch(b),
      floats_per_sequence(config.state_floats_per_sequence()),
      data(static_cast<size_t>(b * config.state_floats_per_sequence()), 0.f),
      positions(static_cast<size_t>(b), 0) {
  if (config.cache_floats_per_token() > 0) {
    // Only the layers that keep tokens have a cache (a hybrid model's attention layers), each
    // with its own row width.
    for (int64_t l = 0; l < config.layers; ++l) {
      const Config c = config.layer(l);
      if (!c.mixer->cache_floats_per_token_per_layer) continue;
      cache.row_floats.push_back(c.mixer->cache_floats_per_token_per_layer(c));
      ++cache.layers;
    }
    cache.floats_per_token = config.cache_floats_per_token();
    cache.sequences = b;
    cache.storage.resize(static_cast<size_t>(cache.layers));
  }
}

void State::reset() {
  std::fill(data.begin(), data.end(), 0.f);
  std::fill(positions.begin(), positions.end(), 0);
}

void State::reset(int64_t b) {
  std::fill(sequence(b), sequence(b) + floats_per_sequence, 0.f);
  positions[b] = 0;
}

void State::fork(int64_t src, int64_t dst) {
  RETNET_CHECK(src >= 0 && src < batch && dst >= 0 && dst < batch,
               "fork of sequence {} into {}: the state holds {} sequences", src, dst, batch);
  if (src == dst) return;
  copy_floats(sequence(dst), sequence(src), floats_per_sequence);
  cache.copy_sequence(src, dst, positions[src]);
  positions[dst] = positions[src];
}

void State::remove(int64_t b, int64_t active) {
  const int64_t after = active - b - 1;
  if (after <= 0) return;
  if (floats_per_sequence > 0)  // 0 for the mixers with only a cache
    std::memmove(sequence(b), sequence(b + 1),
                 static_cast<size_t>(after * floats_per_sequence) * sizeof(float));
  for (int64_t i = b; i + 1 < active; ++i) cache.copy_sequence(i + 1, i, positions[i + 1]);
  std::move(positions.begin() + b + 1, positions.begin() + active, positions.begin() + b);
}

int64_t State::cache_floats(int64_t b) const {
  return cache.empty() ? 0 : positions[b] * cache.floats_per_token;
}

void State::snapshot(int64_t b, float* state_out, float* cache_out) const {
  copy_floats(state_out, sequence(b), floats_per_sequence);
  float* out = cache_out;
  if (cache.empty()) return;
  for (int64_t l = 0; l < cache.layers; ++l) {
    const int64_t rows = positions[b] * cache.row_floats[l];
    copy_floats(out, cache.block(l, b), rows);
    out += rows;
  }
}

void State::restore(int64_t b, const float* state_in, const float* cache_in, int64_t position) {
  RETNET_CHECK(position >= 0, "restore at position {}", position);
  copy_floats(sequence(b), state_in, floats_per_sequence);
  const float* in = cache_in;
  positions[b] = position;
  if (cache.empty()) return;
  cache.reserve(position);
  for (int64_t l = 0; l < cache.layers; ++l) {
    const int64_t rows = position * cache.row_floats[l];
    copy_floats(cache.block(l, b), in, rows);
    in += rows;
  }
}

void State::rewind(int64_t b, const float* state_in, int64_t position) {
  RETNET_CHECK(position >= 0 && position <= positions[b],
               "sequence {} at position {} cannot roll back to position {}", b, positions[b],
               position);
  copy_floats(sequence(b), state_in, floats_per_sequence);
  positions[b] = position;
}

void TokenCache::reserve(int64_t tokens) {
  if (empty() || tokens <= capacity) return;
  const int64_t grown = std::max({tokens, 2 * capacity, int64_t{16}});
  for (size_t l = 0; l < storage.size(); ++l) {
    std::vector<float>& layer = storage[l];
    const size_t row = static_cast<size_t>(row_floats[l]);
    std::vector<float> next(static_cast<size_t>(sequences * grown) * row);
    for (int64_t b = 0; b < sequences && capacity > 0; ++b)
      std::memcpy(next.data() + b * grown * row, layer.data() + b * capacity * row,
                  capacity * row * sizeof(float));
    layer.swap(next);
  }
  capacity = grown;
}

void TokenCache::copy_sequence(int64_t from, int64_t to, int64_t rows) {
  if (empty() || from == to || rows <= 0) return;
  for (int64_t l = 0; l < layers; ++l)
    std::memmove(block(l, to), block(l, from),
                 static_cast<size_t>(rows * row_floats[l]) * sizeof(float));
}

size_t TokenCache::bytes() const {
  size_t total = 0;
  for (const auto& layer : storage) total += layer.size() * sizeof(float);
  return total;
}

}  // namespace retnet
