// The consumer warpgroup's main loop over a work's key tiles, in its two schedules, around a
// kernel's consumer `C` (consumer.cuh: its registers and hooks; the kernel's issue_qk(stage) and
// issue_pv(stage), the GEMMs, committed; softmax(n_block, correction), S → P in place).
// A wgmma's accumulator is written asynchronously, unseen by the compiler: every read of it is
// fenced after its wait_group, every write before its wgmma.fence (fence_registers).
#pragma once

#include "cuda/hopper/pingpong.cuh"
#include "cuda/hopper/pipeline.cuh"
#include "cuda/hopper/primitives.cuh"

namespace attnsuite::cuda::hopper {

// S = Q·K_jᵀ of the tile in stage kv, waited: K landed, the tensor cores taken (take_turn: the
// work's first GEMMs), issued, passed on.
template <class C, int kStages, class Turns>
__device__ __forceinline__ void compute_scores(C& c, const PipelineState<kStages>& kv, const Turns& turns,
                                               bool take_turn) {
  c.k_full.wait(kv);
  if (take_turn) turns.take();
  c.fence_qk();
  wgmma_fence();
  c.issue_qk(kv.stage);
  turns.pass();
  wgmma_wait<0>();
  c.fence_s();
}

// One tile at a time: S, wait, softmax, P·V, wait (flash3 v1; with ping-pong, sage's
// "wgmma-pingpong": a section is P·V of tile n with Q·Kᵀ of tile n + 1, the first tile's Q·Kᵀ
// and the last tile's P·V sections of their own).
template <class C, class Tile, int kStages, class Turns>
__device__ __forceinline__ void serial_mainloop(C& c, const Tile& tile, PipelineState<kStages>& kv,
                                                const Turns& turns) {
  for (int visit = 0; visit < tile.tiles; ++visit) {
    const int n_block = tile.block(visit);
    c.prepare(n_block);
    compute_scores(c, kv, turns, visit == 0);
    c.release_q(visit == tile.tiles - 1);
    float correction[2];
    c.softmax(n_block, correction);
    c.rescale_o(correction);
    c.convert_p();
    turns.take();
    c.v_full.wait(kv);
    c.fence_pv();
    c.fence_p();
    wgmma_fence();
    c.issue_pv(kv.stage);
    wgmma_wait<0>();
    c.fence_pv();
    c.accumulate(correction);
    c.release_stage(kv);  // its wgmma reads of K and V have completed
    ++kv;
    if (visit + 1 == tile.tiles) turns.pass();
  }
}

// Software-pipelined inside the warpgroup (flash3 v2): for tile j, Q·K_jᵀ and P_{j-1}·V_{j-1} are
// issued in one section; wait_group 1 returns when S_j is in, so the softmax of tile j runs while
// the tensor cores still do P_{j-1}·V_{j-1}; then wait_group 0, O's correction (update_o), P_j.
// Costs one more live tile of registers (P_{j-1}, an operand of the running wgmma, beside S_j).
// K_j is released once S_j is waited (release_k), V_{j-1} once its P·V is (release_v), so the
// producer can refill K's slot while V's is still being read.
template <class C, class Tile, int kStages, class Turns>
__device__ __forceinline__ void overlapped_mainloop(C& c, const Tile& tile, PipelineState<kStages>& kv,
                                                    const Turns& turns) {
  {  // The first tile: S alone.
    const int n_block = tile.block(0);
    c.prepare(n_block);
    compute_scores(c, kv, turns, true);
    c.release_k(kv, tile.tiles == 1);
    float correction[2];
    c.softmax(n_block, correction);  // O is 0: nothing to rescale
    c.begin_o(correction);
    c.convert_p();
  }
  for (int visit = 1; visit < tile.tiles; ++visit) {
    const int n_block = tile.block(visit);
    const PipelineState<kStages> previous = kv;
    ++kv;
    c.prepare(n_block);
    c.k_full.wait(kv);
    c.v_full.wait(previous);
    turns.take();
    c.fence_qk();
    c.fence_pv();
    c.fence_p();
    wgmma_fence();
    c.issue_qk(kv.stage);
    c.issue_pv(previous.stage);
    turns.pass();
    wgmma_wait<1>();  // S_j is in; P_{j-1}·V_{j-1} may still run
    c.fence_s();
    c.release_k(kv, visit == tile.tiles - 1);
    float correction[2];
    c.softmax(n_block, correction);
    wgmma_wait<0>();
    c.fence_pv();
    c.fence_p();
    c.release_v(previous);
    c.update_o(correction);
    c.convert_p();
  }
  // The last tile's P·V.
  c.v_full.wait(kv);
  turns.take();
  c.fence_pv();
  c.fence_p();
  wgmma_fence();
  c.issue_pv(kv.stage);
  turns.pass();
  wgmma_wait<0>();
  c.fence_pv();
  c.release_v(kv);
  c.finish_o();
  ++kv;  // the next work starts on the next stage
}

}  // namespace attnsuite::cuda::hopper
