// cpu-flash's forward kernel for AVX-512. Only the functions defined between the region
// markers are compiled for AVX-512; the headers before them stay baseline (simd_target.hpp
// says why), so forward_kernel.hpp must find everything it includes already included here.
#include "core/simd_target.hpp"
#include "cpu/flash/forward.hpp"
#include "cpu/simd_math.hpp"

ATTNSUITE_AVX512_BEGIN
#include "cpu/flash/forward_kernel.hpp"

namespace attnsuite::cpu::flash {

void forward_avx512(const AttentionProblem& problem, const AttentionArgs& args, const TileConfig& tiles) {
  run_forward<simd::Avx512>(problem, args, tiles);
}

}  // namespace attnsuite::cpu::flash
ATTNSUITE_AVX512_END
