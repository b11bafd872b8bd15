#include "retnet/core/cpu_isa.h"

#include <cstdlib>
#include <string>

#include "retnet/core/error.h"

namespace retnet {

namespace {

Isa read_cap() {
  const char* value = std::getenv("RETNET_MAX_ISA");
  if (value == nullptr || *value == '\0') return Isa::Avx512;
  const std::string v = value;
  if (v == "avx512") return Isa::Avx512;
  if (v == "avx2") return Isa::Avx2;
  if (v == "scalar") return Isa::Scalar;
  throw Error(fmt::format("RETNET_MAX_ISA = '{}': expected avx512, avx2 or scalar", v));
}

}  // namespace

Isa isa_cap() {
  static const Isa cap = read_cap();
  return cap;
}

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::Avx512:
      return "avx512";
    case Isa::Avx2:
      return "avx2";
    default:
      return "scalar";
  }
}

}  // namespace retnet
