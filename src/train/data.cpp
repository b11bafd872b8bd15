#include "retnet/train/data.h"

#include <fstream>
#include <iterator>

#include "retnet/core/error.h"
#include "retnet/core/rng.h"

namespace retnet {

TokenDataset TokenDataset::from_text_file(const std::string& path, double val_fraction) {
  std::ifstream in(path, std::ios::binary);
  RETNET_CHECK(in.good(), "cannot open training data '{}'", path);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  RETNET_CHECK(val_fraction > 0 && val_fraction < 1, "validation fraction must be in (0, 1), got {}",
               val_fraction);
  const int64_t n = static_cast<int64_t>(text.size());
  const int64_t n_val = static_cast<int64_t>(static_cast<double>(n) * val_fraction);
  RETNET_CHECK(n - n_val >= 2 && n_val >= 2, "'{}' holds {} bytes: too little text to train on", path,
               n);
  TokenDataset d;
  d.train.reserve(n - n_val);
  d.val.reserve(n_val);
  for (int64_t i = 0; i < n; ++i)
    (i < n - n_val ? d.train : d.val).push_back(static_cast<unsigned char>(text[i]));
  d.train_bytes = n - n_val;
  d.val_bytes = n_val;
  return d;
}

void sample_batch(const std::vector<int32_t>& tokens, int64_t B, int64_t T, uint64_t seed,
                  uint64_t draw, int32_t* inputs, int32_t* targets) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  RETNET_CHECK(n >= T + 1, "{} tokens cannot fill a window of {} + 1", n, T);
  Philox rng(seed);
  for (int64_t b = 0; b < B; ++b) {
    const auto bits = rng.block(/*stream=*/0x5eed0000u + draw, static_cast<uint64_t>(b));
    const uint64_t r = (static_cast<uint64_t>(bits[0]) << 32) | bits[1];
    const int64_t off = static_cast<int64_t>(r % static_cast<uint64_t>(n - T));
    for (int64_t t = 0; t < T; ++t) {
      inputs[b * T + t] = tokens[off + t];
      targets[b * T + t] = tokens[off + t + 1];
    }
  }
}

}  // namespace retnet
