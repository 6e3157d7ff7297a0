// cpu-flash's forward kernel for AVX2 + FMA, the build's baseline ISA.
#include "cpu/flash/forward.hpp"
#include "cpu/flash/forward_kernel.hpp"

namespace attnsuite::cpu::flash {

void forward_avx2(const AttentionProblem& problem, const AttentionArgs& args, const TileConfig& tiles) {
  run_forward<simd::Avx2>(problem, args, tiles);
}

}  // namespace attnsuite::cpu::flash
