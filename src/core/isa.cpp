#include "core/isa.hpp"

#include <fmt/format.h>

#include <cstdlib>
#include <string>

#include "attnsuite/error.hpp"
#include "core/enum_names.hpp"

namespace attnsuite::cpu {

namespace {
constexpr EnumName<CpuIsa> kIsaNames[] = {{CpuIsa::Avx2, "avx2"}, {CpuIsa::Avx512, "avx512"}};
}  // namespace

std::string_view to_string(CpuIsa isa) { return name_of(kIsaNames, isa, "unknown"); }

std::optional<CpuIsa> parse_cpu_isa(std::string_view name) { return value_of(kIsaNames, name); }

// __builtin_cpu_supports also checks that the OS saves the registers (XCR0), so an AVX-512 CPU
// under an OS or hypervisor that disables them reads as AVX2.
bool cpu_supports(CpuIsa isa) {
  __builtin_cpu_init();
  switch (isa) {
    case CpuIsa::Avx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case CpuIsa::Avx512:
      return cpu_supports(CpuIsa::Avx2) && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
  }
  return false;
}

CpuIsa widest_cpu_isa() { return cpu_supports(CpuIsa::Avx512) ? CpuIsa::Avx512 : CpuIsa::Avx2; }

CpuIsa selected_cpu_isa() {
  const char* value = std::getenv("ATTNSUITE_CPU_ISA");
  if (value == nullptr || *value == '\0') return widest_cpu_isa();
  const std::optional<CpuIsa> isa = parse_cpu_isa(value);
  if (!isa) throw Error(ErrorKind::Usage, fmt::format("ATTNSUITE_CPU_ISA '{}' unknown; allowed: avx2, avx512", value));
  if (!cpu_supports(*isa))
    throw Error(ErrorKind::Unsupported,
                fmt::format("ATTNSUITE_CPU_ISA={}: this CPU lacks it (avx512 needs avx512f, avx512bw, avx512dq, "
                            "avx512vl; this CPU runs {})",
                            value, to_string(widest_cpu_isa())));
  return *isa;
}

}  // namespace attnsuite::cpu
