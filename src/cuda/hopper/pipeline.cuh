// The shared-memory ring of the Hopper kernels: which stage a K/V tile is in and the phase of
// its mbarriers (PipelineState), and the barriers as rings of one per stage (BarrierRing).
#pragma once

#include <cstdint>

#include "cuda/hopper/primitives.cuh"

namespace attnsuite::cuda::hopper {

// The stage of a kStages-deep ring and the parity of the phase its barriers are in: a pass over
// the ring flips it. ++ moves to the next stage, wrapping both.
template <int kStages>
struct PipelineState {
  int stage = 0;
  std::uint32_t phase = 0;
  __device__ __forceinline__ PipelineState& operator++() {
    if (++stage == kStages) {
      stage = 0;
      phase ^= 1u;
    }
    return *this;
  }
};

// kStages mbarriers of 8 bytes, one per stage: entries first .. first + kStages - 1 of the
// kernel's barrier array at `base`.
template <int kStages>
struct BarrierRing {
  std::uint32_t base;
  int first;
  __device__ __forceinline__ std::uint32_t operator[](int stage) const {
    return base + 8u * static_cast<std::uint32_t>(first + stage);
  }
  // The stage's phase `state.phase` has completed (a "full" barrier: the tile has landed).
  __device__ __forceinline__ void wait(const PipelineState<kStages>& state) const {
    barrier_wait((*this)[state.stage], state.phase);
  }
  // The phase before has completed (an "empty" barrier: the consumers released the stage's
  // previous tile; on the first pass, a fresh barrier, it returns at once).
  __device__ __forceinline__ void wait_released(const PipelineState<kStages>& state) const {
    barrier_wait((*this)[state.stage], state.phase ^ 1u);
  }
  __device__ __forceinline__ void arrive(const PipelineState<kStages>& state) const {
    barrier_arrive((*this)[state.stage]);
  }
};

}  // namespace attnsuite::cuda::hopper
