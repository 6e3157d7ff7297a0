// The shared-memory ring of the Hopper kernels: which stage a K/V tile is in and the phase of
// its mbarriers (PipelineState), the barriers as rings of one per stage (BarrierRing), and the
// producer's TMA copies into it.
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

// A kernel's mbarriers, 8 bytes each from `base`: Q full, kRings rings of one per stage (ring r
// at entries 1 + r·kStages ..), then Q empty (where the kernel has one: persistent kernels).
template <int kStages, int kRings>
struct BarrierSet {
  std::uint32_t q_full;
  __device__ __forceinline__ explicit BarrierSet(std::uint32_t base) : q_full(base) {}
  __device__ __forceinline__ BarrierRing<kStages> ring(int r) const { return {q_full, 1 + r * kStages}; }
  __device__ __forceinline__ std::uint32_t q_empty_entry() const { return q_full + 8u * (1 + kRings * kStages); }
  // Expected arrivals: Q full 1 (the producer's, with the transaction bytes), Q empty
  // q_empty_arrivals (0: none), ring r arrivals[r]. Made visible to the async (TMA) proxy; a
  // __syncthreads() must follow.
  __device__ __forceinline__ void init(const int (&arrivals)[kRings], int q_empty_arrivals) const {
    barrier_init(q_full, 1);
    if (q_empty_arrivals > 0) barrier_init(q_empty_entry(), q_empty_arrivals);
    for (int stage = 0; stage < kStages; ++stage)
#pragma unroll
      for (int r = 0; r < kRings; ++r) barrier_init(ring(r)[stage], arrivals[r]);
    barrier_init_fence();
  }
};

// The dynamic shared memory's start as a shared-window address, rounded up to the 1024-byte
// period of the 128B swizzle (nothing promises more alignment; the traits reserve the 1024 bytes).
__device__ __forceinline__ std::uint32_t shared_base_1024() {
  extern __shared__ __align__(1024) unsigned char shared_bytes[];
  return (shared_address(shared_bytes) + 1023u) & ~1023u;
}

// This thread's warpgroup, broadcast from lane 0 so that the compiler knows it is warp-uniform:
// what derives from it (shared addresses, wgmma descriptors) can then live in uniform registers.
__device__ __forceinline__ int warpgroup_index() {
  return __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x) / 128, 0);
}

// The boxes (column 64·slab, row, head, batch) of `map` into destination + slab · slab_bytes, one
// per 64-column slab (kSlabs = 1: one box at column 0), completing their bytes on `barrier`.
template <int kSlabs>
__device__ __forceinline__ void tma_load_slabs(std::uint32_t destination, int slab_bytes, const CUtensorMap* map,
                                               int row, int head, int batch, std::uint32_t barrier) {
#pragma unroll
  for (int slab = 0; slab < kSlabs; ++slab)
    tma_load_4d(destination + slab * slab_bytes, map, 64 * slab, row, head, batch, barrier);
}

// A tile into stage kv of `full` once `empty` has released it (the consumers are done with the
// stage's previous tile; on the first pass a fresh barrier lets it through): `bytes` expected on
// the stage's full barrier, then its boxes.
template <int kSlabs, int kStages>
__device__ __forceinline__ void load_stage(const BarrierRing<kStages>& empty, const BarrierRing<kStages>& full,
                                           const PipelineState<kStages>& kv, std::uint32_t destination, int slab_bytes,
                                           int bytes, const CUtensorMap* map, int row, int head, int batch) {
  empty.wait_released(kv);
  barrier_arrive_expect_bytes(full[kv.stage], bytes);
  tma_load_slabs<kSlabs>(destination, slab_bytes, map, row, head, batch, full[kv.stage]);
}

// The producer's loop: per work of the Schedule whose rows see keys, load_q(tile), then
// load_kv(tile, kv, key_begin) for each of its key tiles, into the ring's next stage kv. The
// ring continues from one work to the next (persistent CTAs).
template <class Schedule, class Tile, int kStages, class Params, class LoadQ, class LoadKV>
__device__ __forceinline__ void produce_tiles(const Params& params, LoadQ load_q, LoadKV load_kv) {
  PipelineState<kStages> kv;
  Schedule::template for_each_work<Tile>(params, [&](const Tile& tile) {
    if (tile.tiles <= 0) return;  // the consumers write O = 0, LSE = -inf
    load_q(tile);
    for (int visit = 0; visit < tile.tiles; ++visit) {
      load_kv(tile, kv, tile.block(visit) * Tile::kTileN);
      ++kv;
    }
  });
}

}  // namespace attnsuite::cuda::hopper
