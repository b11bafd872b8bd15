#pragma once
// A mixer's own settings (attention's heads and window, the Performer's feature count, ...): a
// struct defined in the mixer's folder (src/mixers/<name>/<name>_options.h), read from and written
// to a config's JSON by the mixer's spec, and carried by a Config as a shared, immutable value, so
// that copying a config (one per layer of a hybrid model) never allocates.
#include <memory>

namespace retnet {

class MixerOptions {
 public:
  virtual ~MixerOptions() = default;
  virtual bool equals(const MixerOptions& other) const = 0;
  virtual bool is_default() const = 0;
};

// Options shared by the configs that hold them (null: the mixer's defaults).
using MixerOptionsPtr = std::shared_ptr<const MixerOptions>;

// Equal settings, a null pointer standing for the defaults.
inline bool same_options(const MixerOptionsPtr& a, const MixerOptionsPtr& b) {
  if (a == b) return true;
  if (!a) return b->is_default();
  if (!b) return a->is_default();
  return a->equals(*b);
}

// The base of a mixer's options struct `Self` (an aggregate with a defaulted operator==).
template <class Self>
class MixerOptionsOf : public MixerOptions {
 public:
  bool equals(const MixerOptions& other) const override {
    const auto* o = dynamic_cast<const Self*>(&other);
    return o != nullptr && *o == static_cast<const Self&>(*this);
  }
  bool is_default() const override { return static_cast<const Self&>(*this) == Self{}; }
  bool operator==(const MixerOptionsOf&) const { return true; }  // compared by Self's fields
};

}  // namespace retnet
