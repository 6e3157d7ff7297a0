// The register budget that setmaxnreg redistributes in the warp-specialized Hopper kernels
// (flash3, flash3-fp8, sage's wgmma kernel). Host-visible constexpr, for the traits' checks.
#pragma once

namespace attnsuite::cuda::hopper {

// The registers a CTA of `threads` threads launched with __launch_bounds__(threads, 1) holds:
// 65536 / threads per thread rounded down to the allocation granule of 8, times threads (384
// threads: 168 · 384 = 64512, not 65536). setmaxnreg only moves registers between warpgroups
// inside this pool: a split that needs more leaves setmaxnreg.inc waiting forever — flash3 v4b
// (producer 32 + consumers 2 × 240 = 65536) hung on the H200 at its first kernel, 2026-12-04.
constexpr int launch_register_pool(int threads) { return 65536 / threads / 8 * 8 * threads; }

}  // namespace attnsuite::cuda::hopper
