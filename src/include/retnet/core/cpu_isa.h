#pragma once
// The instruction-set levels of the engine's run-time kernel choice. Kernel files are compiled
// once per level (retnet/core/isa_kernels.h) or carry per-level target attributes, and
// kernel_isa() picks the level once for the process: the best this CPU runs, capped by
// RETNET_MAX_ISA=avx2|scalar so that an AVX-512 machine runs, tests and measures the paths an
// AVX2-only or older CPU takes. Code outside the kernel files is compiled for the build's target
// (portable x86-64 by default; the build machine with -DRETNET_NATIVE=ON) and is not capped.
namespace retnet {

enum class Isa { Scalar, Avx2, Avx512 };

// The cap: RETNET_MAX_ISA read once ("avx512", "avx2" or "scalar"; unset or empty: no cap, i.e.
// Avx512). Another value throws retnet::Error naming the variable and the values it takes.
Isa isa_cap();
const char* isa_name(Isa isa);

// The best level this CPU runs: Avx512 needs AVX-512 F, BW, VL and DQ besides Avx2's AVX2, FMA
// and F16C.
Isa cpu_isa();

// The level of every per-level kernel: min(cpu_isa(), isa_cap()), chosen once.
Isa kernel_isa();

// Whether kernels of this level may be chosen: the cap allows it (the CPU is asked separately).
inline bool isa_allowed(Isa level) { return static_cast<int>(level) <= static_cast<int>(isa_cap()); }

}  // namespace retnet
