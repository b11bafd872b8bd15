#include "aft_options.h"

#include "../shared/int_option.h"

namespace retnet::detail {
namespace {
constexpr char kKey[] = "aft_max_distance";
using Codec = IntOptionCodec<AftOptions, kKey, 1, (1 << 24)>;
}  // namespace

const MixerOptionsCodec& aft_options_codec() { return Codec::codec(); }
int64_t aft_max_distance(const ModelSettings& c) { return mixer_options<AftOptions>(c).value; }

}  // namespace retnet::detail
