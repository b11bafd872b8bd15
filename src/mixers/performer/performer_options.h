#pragma once
// The Performer's options: "performer_features", the FAVOR+ random features per head.
#include <cstdint>

#include "retnet/model/config.h"

namespace retnet::detail {

struct PerformerOptions : MixerOptionsOf<PerformerOptions> {
  int64_t value = 64;  // features per head (m)
  bool operator==(const PerformerOptions&) const = default;
};

struct MixerOptionsCodec;
const MixerOptionsCodec& performer_options_codec();
// The features per head of a Performer layer's config.
int64_t performer_features(const ModelSettings& c);

}  // namespace retnet::detail
