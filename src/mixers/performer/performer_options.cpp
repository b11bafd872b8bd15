#include "performer_options.h"

#include "../shared/int_option.h"

namespace retnet::detail {
namespace {
constexpr char kKey[] = "performer_features";
using Codec = IntOptionCodec<PerformerOptions, kKey, 1, 65536>;
}  // namespace

const MixerOptionsCodec& performer_options_codec() { return Codec::codec(); }
int64_t performer_features(const ModelSettings& c) {
  return mixer_options<PerformerOptions>(c).value;
}

}  // namespace retnet::detail
