// Host entry points of the sparge kernels (no CUDA headers: included by host code). C++17.
#pragma once

#include "attnsuite/dtype.hpp"
#include "cuda/flash2/params.hpp"

namespace attnsuite::cuda::sparge {

// The predictor's inputs, settings and outputs (src/cuda/sparge/predictor.cu; the rule is
// sparse::select_blocks, src/sparse/sparse.hpp). All pointers on the device.
struct PredictorParams {
  const void* q = nullptr;
  const void* k = nullptr;
  long long q_batch_stride = 0, q_row_stride = 0, q_head_stride = 0;
  long long k_batch_stride = 0, k_row_stride = 0, k_head_stride = 0;
  int batch = 0, heads_q = 0, heads_kv = 0, group_size = 1, seq_q = 0, seq_kv = 0, head_dim = 0;
  int block_m = 0, block_n = 0, m_blocks = 0, n_blocks = 0;
  float scale = 0;                          // softmax scale
  int window_left = -1, window_right = -1;  // causal folded into window_right, as in flash2
  // Per q head: sim_threshold, cdf_threshold, topk, dense (as 0/1): 4 × heads_q floats.
  const float* settings = nullptr;
  int sink = 1;
  // Outputs and scratch.
  float* q_mean = nullptr;                    // (batch, heads_q, m_blocks, head_dim)
  float* q_sim = nullptr;                     // (batch, heads_q, m_blocks)
  float* k_mean = nullptr;                    // (batch, heads_kv, n_blocks, head_dim)
  float* k_sim = nullptr;                     // (batch, heads_kv, n_blocks)
  int* block_index = nullptr;                 // (batch, heads_q, m_blocks, n_blocks)
  int* block_count = nullptr;                 // (batch, heads_q, m_blocks)
  unsigned long long* kept_blocks = nullptr;  // += kept blocks
};

// flash2's tiles (q block rows, k block keys, rows per warp) per head dim, which the block mask
// is made of: checked against flash2::Config by a static_assert (sparse_launch.cuh) and against
// sparse::block_shape_for by the backends.
struct Tiles {
  int m, n, rows_per_warp;
};
constexpr Tiles tiles_for(int head_dim) {
  return head_dim == 64 ? Tiles{128, 64, 32} : head_dim == 128 ? Tiles{128, 32, 32} : Tiles{64, 32, 16};
}

// The Hopper (sm_90a) kernels' tiles, which `sparge`/`block-sparse` there (flash3) and
// `sparge-sage` (sage2's wgmma kernel) count their blocks in: 128 query rows (two consumer
// warpgroups of 64: rows_per_warp is a warpgroup's rows here) × 128 keys, at d64 and d128.
// Checked against flash3::Config (flash3/launch.cu) and sage's wgmma Traits
// (sage/wgmma_launch_template.cuh) by static_asserts.
inline constexpr Tiles kHopperTiles{128, 128, 64};

// The most key blocks per q block the selection kernel sorts in shared memory.
inline constexpr int kMaxKeyBlocks = 4096;

// The kept lists in tiles of `factor` blocks, for the Hopper kernels (sparse::coarsen_mask on
// the device: a tile is kept when any of its blocks is; ascending lists stay ascending).
struct CoarsenParams {
  const int* block_index = nullptr;  // (slots, n_blocks), as PredictorParams
  const int* block_count = nullptr;  // (slots)
  int slots = 0, n_blocks = 0, n_tiles = 0, factor = 1;
  int* tile_index = nullptr;                 // (slots, n_tiles)
  int* tile_count = nullptr;                 // (slots)
  unsigned long long* kept_tiles = nullptr;  // += kept tiles
};

// Pools, then selects; throws Error(Unsupported) for a dtype/head dim without a kernel.
void launch_predictor(const PredictorParams& params, DType dtype, void* stream);
void launch_coarsen(const CoarsenParams& params, void* stream);
// The block-sparse flash2 kernel (BlockSparse<Config<Element, head dim>>): fp16/bf16, d64/d128.
void launch_block_sparse(const flash2::SparseParams& params, DType dtype, void* stream);

}  // namespace attnsuite::cuda::sparge
