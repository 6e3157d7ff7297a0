#pragma once

#include <memory>

#include "attnsuite/backend.hpp"

namespace attnsuite::cuda {

// `sage`: INT8 Q·Kᵀ (smoothed K, per-tile scales), 16-bit P·V. `sage2`: INT8 Q·Kᵀ (per-warp /
// per-8-key scales), FP8 e4m3 P·V (sm_89+). docs/kernels/sage.md.
std::unique_ptr<Backend> make_sage_backend();
std::unique_ptr<Backend> make_sage2_backend();

namespace sage {

// The kept key tiles of a block-sparse forward, on the device: for slot = (batch · heads_q + q
// head) · m_blocks + q tile, block_index[slot · n_blocks + i], i < block_count[slot], ascending.
// Tiles of 128 query rows × 128 keys (the wgmma kernel's).
struct BlockList {
  const int* index = nullptr;
  const int* count = nullptr;
  int m_blocks = 0, n_blocks = 0;
};

// sage2 with a block list, for `sparge-sage` (src/cuda/sparge/): the same quantization passes
// (over all of Q, K and V), then the sm_90a wgmma kernel visiting only the listed key tiles.
class Sage2BlockSparse {
 public:
  virtual ~Sage2BlockSparse() = default;
  // sage2's rules, and an sm_90 GPU with this build's wgmma kernels.
  virtual Support supports(const AttentionProblem& problem) const = 0;
  virtual std::size_t workspace_bytes(const AttentionProblem& problem) const = 0;
  // args.workspace (workspace_bytes of it) is required.
  virtual void forward(const AttentionProblem& problem, const AttentionArgs& args, const BlockList& list,
                       Stream stream) const = 0;
};
std::unique_ptr<Sage2BlockSparse> make_sage2_block_sparse();

}  // namespace sage

}  // namespace attnsuite::cuda
