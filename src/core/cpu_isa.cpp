#include "retnet/core/cpu_isa.h"

#if defined(__x86_64__)
#include <cpuid.h>
#endif

#include <algorithm>
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

Isa read_cpu() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  // F16C from cpuid itself: clang before 15 does not know it as a __builtin_cpu_supports name.
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  const bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & bit_F16C);
  if (!(f16c && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")))
    return Isa::Scalar;
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq"))
    return Isa::Avx512;
  return Isa::Avx2;
#else
  return Isa::Scalar;
#endif
}

}  // namespace

Isa cpu_isa() {
  static const Isa level = read_cpu();
  return level;
}

Isa kernel_isa() {
  static const Isa level = std::min(cpu_isa(), isa_cap());
  return level;
}

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
