#include "retnet/model/mixer.h"

#include "retnet/core/error.h"
#include "retnet/mixers/retention.h"

namespace retnet {
namespace {

struct MixerEntry {
  MixerKind kind;
  const char* name;
};
constexpr MixerEntry kMixers[] = {{MixerKind::Retention, "retention"},
                                  {MixerKind::Attention, "attention"},
                                  {MixerKind::Linear, "linear"},
                                  {MixerKind::Performer, "performer"},
                                  {MixerKind::Aft, "aft"},
                                  {MixerKind::AftSimple, "aft-simple"},
                                  {MixerKind::Rwkv, "rwkv"}};

}  // namespace

const char* mixer_name(MixerKind kind) {
  for (const auto& m : kMixers)
    if (m.kind == kind) return m.name;
  return "?";
}

const char* mixer_names() {
  return "retention, attention, linear, performer, aft, aft-simple, rwkv";
}

MixerKind parse_mixer(const std::string& name) {
  for (const auto& m : kMixers)
    if (name == m.name) return m.kind;
  throw Error(fmt::format("unknown mixer '{}' (expected one of: {})", name, mixer_names()));
}

bool mixer_is_channelwise(MixerKind kind) {
  return kind == MixerKind::Aft || kind == MixerKind::AftSimple || kind == MixerKind::Rwkv;
}

bool mixer_uses_rotation(MixerKind kind) {
  return kind == MixerKind::Retention || kind == MixerKind::Attention;
}

bool mixer_has_cache(MixerKind kind) {
  return kind == MixerKind::Attention || kind == MixerKind::Aft;
}

bool mixer_has_form(MixerKind kind, Form form) {
  switch (form) {
    case Form::Parallel:
    case Form::Recurrent:
      return true;
    case Form::Chunkwise:
      return !mixer_has_cache(kind);
    case Form::Scan:
      return kind == MixerKind::Retention;
  }
  return false;
}

Form mixer_prefill_form(MixerKind kind) {
  return mixer_has_cache(kind) ? Form::Parallel : Form::Chunkwise;
}

bool mixer_trains_with(MixerKind kind, Form form) {
  return form == Form::Parallel ||
         (form == Form::Chunkwise && mixer_has_form(kind, form));
}

}  // namespace retnet
