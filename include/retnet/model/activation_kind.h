#pragma once
// Which activation a model's FFN uses (the config's activation_fn); the functions are in
// ops/activation.h.
#include <string>

namespace retnet {

enum class Activation { Gelu, Swish };

Activation parse_activation(const std::string& name);  // "gelu" | "swish" (alias "silu")
const char* activation_name(Activation a);

}  // namespace retnet
