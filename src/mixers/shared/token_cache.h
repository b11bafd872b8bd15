#pragma once
// What attention's KV cache and AFT's key/value cache share: B sequences' blocks of `capacity`
// tokens each in one growable buffer, a length per sequence, and the checks on both. `row` is
// the floats one cached token takes. Errors name the operation, the cache and how to grow it.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "retnet/core/error.h"

namespace retnet {

// Storage and room for T more tokens of each of B sequences.
template <typename Cache>
void check_cache_room(const Cache& cache, int64_t B, int64_t T, const char* what,
                      const char* cache_name, const char* reserve_function) {
  RETNET_CHECK(cache.data != nullptr && cache.length != nullptr,
               "{}: the {} cache has no storage or no lengths", what, cache_name);
  for (int64_t b = 0; b < B; ++b)
    RETNET_CHECK(cache.length[b] >= 0 && cache.length[b] + T <= cache.capacity,
                 "{}: sequence {} holds {} tokens and gets {} more, past the {} cache's capacity "
                 "of {} tokens (grow it with {})",
                 what, b, cache.length[b], T, cache_name, cache.capacity, reserve_function);
}

// Grows the cache (at least doubling) so that each sequence has room for `new_tokens` more,
// keeping what every sequence holds. `what`: the reserving function, for errors.
template <typename Cache>
void reserve_cache_tokens(Cache& cache, std::vector<float>& storage, int64_t B, int64_t new_tokens,
                          int64_t row, const char* what) {
  RETNET_CHECK(B == 0 || cache.length != nullptr, "{}: no lengths array", what);
  const int64_t old_capacity = cache.data ? cache.capacity : 0;
  int64_t longest = 0;
  for (int64_t b = 0; b < B; ++b) {
    RETNET_CHECK(cache.length[b] >= 0 && cache.length[b] <= old_capacity,
                 "{}: sequence {} claims {} cached tokens, the cache holds {}", what, b,
                 cache.length[b], old_capacity);
    longest = std::max(longest, cache.length[b]);
  }
  const int64_t needed = longest + new_tokens;
  if (cache.data != nullptr && needed <= cache.capacity) return;
  const int64_t capacity = std::max({needed, 2 * old_capacity, int64_t{16}});
  RETNET_CHECK(storage.size() >= static_cast<size_t>(B * old_capacity * row),
               "{}: storage holds {} floats, the cache needs {}", what, storage.size(),
               B * old_capacity * row);
  storage.resize(static_cast<size_t>(B * capacity * row));
  // Blocks move to higher offsets; going from the last keeps unmoved ones intact.
  for (int64_t b = B - 1; b >= 1; --b)
    std::memmove(storage.data() + b * capacity * row, storage.data() + b * old_capacity * row,
                 static_cast<size_t>(cache.length[b] * row) * sizeof(float));
  cache.data = storage.data();
  cache.capacity = capacity;
}

}  // namespace retnet
