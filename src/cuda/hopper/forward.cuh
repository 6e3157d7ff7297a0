// The warp-specialized forward of the Hopper kernels: the producer warpgroup and the consumer
// warpgroups over a kernel family's policies (flash3, flash3-fp8). sage's wgmma kernel keeps its
// own loop: written over this layer it measured 1.8-2.2% slower (ncu, H100, d128 N 4096).
#pragma once

#include <cstdint>

#include "cuda/hopper/epilogue.cuh"
#include "cuda/hopper/mainloop.cuh"
#include "cuda/hopper/pingpong.cuh"
#include "cuda/hopper/pipeline.cuh"
#include "cuda/hopper/primitives.cuh"

namespace attnsuite::cuda::hopper {

// Warpgroup 0, the producer, gives most of its registers away (setmaxnreg.dec) and loads
// (Kernel::produce); warpgroups 1 .. kConsumers take them (setmaxnreg.inc) and, per work of the
// Schedule, construct a Kernel::Consumer (64 query rows each), wait for Q, run the main loop in
// the kernel's schedule (mainloop.cuh: overlapped() with ping-pong, else serial, with ping-pong
// where kSerialPingPong) and store O and the LSE (epilogue.cuh). A work whose rows see no key is
// neither loaded nor computed: its rows get O = 0 and LSE = -inf from the consumer as
// constructed. Kernel: params; Tile (a WorkTile), Barriers (a BarrierSet), Consumer;
// produce(bar, smem); overlapped(), kSerialPingPong.
template <class Traits, class Schedule, class Kernel>
__device__ __forceinline__ void warp_specialized_forward(const Kernel& kernel) {
  const std::uint32_t smem = shared_base_1024();
  const typename Kernel::Barriers bar(smem + Traits::kBarrierOffset);
  if (threadIdx.x == 0) bar.init();
  __syncthreads();

  const int warpgroup = warpgroup_index();
  if (warpgroup == 0) {
    release_registers<Traits::kProducerRegisters>();
    kernel.produce(bar, smem);
    return;
  }

  claim_registers<Traits::kConsumerRegisters>();
  const int consumer = warpgroup - 1;
  const PingPong<Traits::kConsumers> turns(consumer);
  const bool ping_pong = Kernel::kSerialPingPong || kernel.overlapped();
  if (ping_pong) turns.start();
  // Persistent: the ring's stage and phase and Q's phase continue from one work to the next.
  std::uint32_t q_phase = 0;
  PipelineState<Traits::kStages> kv;
  using Tile = typename Kernel::Tile;
  Schedule::template for_each_work<Tile>(kernel.params, [&](const Tile& tile) {
    typename Kernel::Consumer c(kernel, tile, consumer, bar, smem);
    if (tile.tiles > 0) {
      barrier_wait(bar.q_full, q_phase);
      q_phase ^= 1u;
      if (kernel.overlapped()) {
        overlapped_mainloop(c, tile, kv, turns);
      } else if constexpr (Kernel::kSerialPingPong) {
        serial_mainloop(c, tile, kv, turns);
      } else {
        serial_mainloop(c, tile, kv, NoPingPong{});
      }
    }
    store_rows<typename Traits::Element, Traits::kHeadDim>(kernel.params, tile, c);
  });
  if (ping_pong) turns.finish();
}

}  // namespace attnsuite::cuda::hopper
