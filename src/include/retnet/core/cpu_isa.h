#pragma once
// The instruction sets the engine's run-time kernel choice may use. By default every kernel this
// CPU can run is a candidate; RETNET_MAX_ISA=avx2|scalar caps the choice (the row-major and
// quantised decode kernels, and the OpenBLAS core type) so that an AVX-512 machine runs, tests
// and measures the paths an AVX2-only or older CPU takes. Code compiled for the build machine
// (-march=native, the default) keeps its own instructions; build with -DRETNET_NATIVE=OFF to stay
// within the cap everywhere.
namespace retnet {

enum class Isa { Scalar, Avx2, Avx512 };

// The cap: RETNET_MAX_ISA read once ("avx512", "avx2" or "scalar"; unset or empty: no cap, i.e.
// Avx512). Another value throws retnet::Error naming the variable and the values it takes.
Isa isa_cap();
const char* isa_name(Isa isa);

// Whether kernels of this level may be chosen: the cap allows it (the CPU is asked separately).
inline bool isa_allowed(Isa level) { return static_cast<int>(level) <= static_cast<int>(isa_cap()); }

}  // namespace retnet
