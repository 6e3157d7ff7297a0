// Which x86 vector ISA the CPU kernels run: chosen at run time, so one build (host code is
// compiled for x86-64-v3, never -march=native) uses AVX-512 where the CPU has it and AVX2
// elsewhere.
//
// How a kernel uses it (cpu-flash's forward is the example: src/cpu/flash/):
//   1. Write the hot code once as templates over a vector policy (simd::Avx2, simd::Avx512 in
//      cpu/simd_math.hpp: Vec, kLanes, load/store/fmadd/exp2...), in a header.
//   2. Instantiate it for AVX2 in an ordinary .cpp, and for AVX-512 in a .cpp that includes every
//      header it needs first and then includes the kernel header between
//      ATTNSUITE_AVX512_BEGIN / ATTNSUITE_AVX512_END (simd_target.hpp). Each exports one plain
//      function (no templates, no vector types in its signature).
//   3. Call the one for selected_cpu_isa() (or a forced one), and report its name with the
//      result (cpu-flash appends it to the kernel config: "q192-k96/avx512").
#pragma once

#include <optional>
#include <string_view>

namespace attnsuite::cpu {

enum class CpuIsa {
  Avx2,    // AVX2 + FMA (x86-64-v3): the build's baseline, 8 fp32 lanes, 16 registers
  Avx512,  // AVX-512 F/BW/DQ/VL (x86-64-v4's vector set): 16 fp32 lanes, 32 registers, masks
};

std::string_view to_string(CpuIsa isa);  // "avx2", "avx512"
// "avx2" or "avx512"; nullopt for anything else.
std::optional<CpuIsa> parse_cpu_isa(std::string_view name);

// Whether this CPU (and the OS, which must save the wider registers) runs `isa`'s kernels.
bool cpu_supports(CpuIsa isa);
// The widest ISA this CPU supports.
CpuIsa widest_cpu_isa();

// The ISA the CPU kernels use: $ATTNSUITE_CPU_ISA ("avx2" or "avx512") when set and not empty,
// else widest_cpu_isa(). Read on every call, so a test can set the variable between runs.
// Throws Error(Usage) for an unknown value and Error(Unsupported) for an ISA this CPU lacks.
CpuIsa selected_cpu_isa();

}  // namespace attnsuite::cpu
