// The register budget that setmaxnreg redistributes in the warp-specialized Hopper kernels
// (flash3's forward and backward, flash3-fp8, sage's wgmma kernel), and the CTA shape they share.
// Host-visible constexpr, for the traits' checks.
#pragma once

namespace attnsuite::cuda::hopper {

// The registers a CTA of `threads` threads launched with __launch_bounds__(threads, 1) holds:
// 65536 / threads per thread rounded down to the allocation granule of 8, times threads (384
// threads: 168 · 384 = 64512, not 65536). setmaxnreg only moves registers between warpgroups
// inside this pool: a split that needs more leaves setmaxnreg.inc waiting forever — flash3 v4b
// (producer 32 + consumers 2 × 240 = 65536) hung on the H200 at its first kernel, 2026-12-04.
constexpr int launch_register_pool(int threads) { return 65536 / threads / 8 * 8 * threads; }

// The warp-specialized CTA of the Hopper kernels: warpgroup 0 the producer, kConsumers consumer
// warpgroups; setmaxnreg gives the producer kProducerRegisters a thread and the consumers
// kConsumerRegisters, inside the pool of __launch_bounds__(kThreads, 1) (checked here). A kernel's
// traits derive from it and say why their split is what it is.
template <int kConsumers_, int kProducerRegisters_, int kConsumerRegisters_>
struct WarpSpecialized {
  static constexpr int kConsumers = kConsumers_;
  static constexpr int kThreads = 128 * (1 + kConsumers);
  static constexpr int kConsumerWarps = 4 * kConsumers;      // arrivals a warp each
  static constexpr int kConsumerThreads = 128 * kConsumers;  // arrivals a thread each
  static constexpr int kProducerRegisters = kProducerRegisters_;
  static constexpr int kConsumerRegisters = kConsumerRegisters_;
  static_assert(kProducerRegisters * 128 + kConsumerRegisters * 128 * kConsumers <= launch_register_pool(kThreads),
                "the register split fits the registers the CTA is launched with");
};

}  // namespace attnsuite::cuda::hopper
