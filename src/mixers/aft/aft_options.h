#pragma once
// AFT-full's options: "aft_max_distance", the learned position biases (a distance past it reads
// the last one).
#include <cstdint>

#include "retnet/model/config.h"

namespace retnet::detail {

struct AftOptions : MixerOptionsOf<AftOptions> {
  int64_t value = 1024;  // position biases per layer
  bool operator==(const AftOptions&) const = default;
};

struct MixerOptionsCodec;
const MixerOptionsCodec& aft_options_codec();
// The position-bias length of an AFT layer's config.
int64_t aft_max_distance(const ModelSettings& c);

}  // namespace retnet::detail
