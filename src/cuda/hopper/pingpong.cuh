// Ping-pong (FlashAttention-3's round-robin of the consumer warpgroups at the tensor cores): each
// consumer issues its GEMMs only after the previous one in turn has issued its own, so that one
// consumer's GEMMs run while the other(s) do their softmax.
#pragma once

#include "cuda/hopper/primitives.cuh"

namespace attnsuite::cuda::hopper {

// Named barrier 1 + c is consumer c's turn: it waits there (bar.sync, 256 = its 128 threads + the
// previous consumer's 128 arriving) and, after its GEMM section, arrives on the next one's
// (bar.arrive), in the order 0, 1, (2,) 0, 1, ... (Barrier 0 is __syncthreads.) start(): the
// last consumer arrives once so that consumer 0 begins. Every consumer has as many sections as
// the others (the same works and tiles: T + 1 per work of T tiles) and arrives after each, the
// last included, so finish(): consumer 0 syncs once more after its last work, and every barrier
// gets as many arrivals as syncs, none left half-arrived at exit. No consumer arrives twice on a
// barrier before its owner has synced on it: consumer c's arrival k + 1 follows c's sync k + 1,
// which the ring lets through only after the next consumer has passed its sync k.
template <int kConsumers>
struct PingPong {
  static_assert(kConsumers == 2 || kConsumers == 3, "named barriers 1 .. kConsumers");
  static constexpr int kPair = 2 * 128;
  int consumer, mine, next;
  __device__ __forceinline__ explicit PingPong(int consumer_)
      : consumer(consumer_),
        mine(1 + consumer_),
        next(kConsumers == 2 ? 2 - consumer_ : 1 + (consumer_ + 1) % kConsumers) {}
  __device__ __forceinline__ void start() const {
    if (consumer == kConsumers - 1) named_barrier_arrive(1, kPair);
  }
  __device__ __forceinline__ void take() const { named_barrier_sync(mine, kPair); }
  __device__ __forceinline__ void pass() const { named_barrier_arrive(next, kPair); }
  __device__ __forceinline__ void finish() const {
    if (consumer == 0) named_barrier_sync(mine, kPair);
  }
};

// The consumers unsynchronized (each its GEMMs, then its softmax: flash3's v1 schedule).
struct NoPingPong {
  __device__ __forceinline__ void take() const {}
  __device__ __forceinline__ void pass() const {}
};

}  // namespace attnsuite::cuda::hopper
