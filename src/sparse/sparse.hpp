// Block-sparse attention, host side: the predictor's rule (SpargeAttn-class), block masks, the
// per-head settings a tuner writes, and a CPU forward that skips masked key blocks. The CUDA
// predictor (src/cuda/sparge/predictor.cu) implements the same rule; tests compare the two.
//
// The rule, per (batch, q head, q block of BlockShape::m rows):
//   1. mean-pool the q block and every visible k block (BlockShape::n keys) to one token each;
//      self-similarity of a block = |mean of its L2-normalized tokens|² (the mean pairwise cosine);
//   2. the q block is computed densely when its settings say dense, or its self-similarity is
//      below sim_threshold (its tokens are not alike, the pooled token says little);
//   3. else p = softmax(q̄·k̄ᵀ·scale) over the visible k blocks; key blocks are kept in
//      descending p (ties: lower index first) while the mass kept before each is < cdf_threshold
//      (or the topk·visible largest when topk > 0);
//   4. always kept besides: k blocks whose self-similarity is below sim_threshold, block 0 when
//      the sink option is on, and blocks that the causal/window mask cuts through (the diagonal).
// Visible blocks follow the problem's mask exactly as the kernel's early exit does.
#pragma once

#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "attnsuite/backend.hpp"

namespace attnsuite::sparse {

// Tile shape of the sparse kernel: a q block of m rows, k blocks of n keys, and the rows that
// share one PV-skip decision (one warp of the CUDA kernel).
struct BlockShape {
  int m = 128;
  int n = 32;
  int rows_per_group = 32;
};
// flash2's tiles per head dim (src/cuda/flash2/traits.cuh, Config; a static_assert there checks
// they agree), used by every sparse backend so that a tuned config means the same blocks on the
// CPU and the GPU. Throws Error(Unsupported) for other head dims.
BlockShape block_shape_for(int head_dim);

// The tunable settings of one q head.
struct HeadSettings {
  double sim_threshold = 0.5;  // q/k blocks with self-similarity below this are always computed
  // Keep key blocks until this much predicted mass is kept. Untuned default: 0.95 measured
  // rel L1 0.16 on `banded` bf16 N = 1024 (cpu-sparge); tuned heads there sit at 0.97–0.98.
  double cdf_threshold = 0.98;
  double topk = 0.0;  // > 0: keep this fraction of the visible key blocks instead
  // λ of the PV skip: a row group skips P·V of a block when every row's block max is below its
  // running max by more than λ (in scaled-score units, natural log). Infinity: never.
  double pv_threshold = std::numeric_limits<double>::infinity();
  bool dense = false;  // the tuner found no useful sparsity: every visible block is computed
  friend bool operator==(const HeadSettings&, const HeadSettings&) = default;
};

// Settings for a whole layer: one per q head, or one for every head.
struct SparseConfig {
  SparseConfig() : heads(1) {}
  SparseConfig(bool sink_block, std::vector<HeadSettings> settings) : sink(sink_block), heads(std::move(settings)) {}
  bool sink = true;
  std::vector<HeadSettings> heads;  // default: one HeadSettings{} for every head

  const HeadSettings& for_head(int q_head) const;
  // Throws Error(Usage) naming the bad value: thresholds out of range, head count neither 1 nor
  // heads_q (when heads_q > 0).
  void validate(int heads_q) const;
};

// The JSON a tuner writes (attnsuite tune --sparse) and --sparse-config reads:
//   {"format": "attnsuite-sparse-config", "version": 1, "sink": true,
//    "layers": [{"name": "...", "heads_q": 32, "heads": [{"sim_threshold": .., "cdf_threshold": ..,
//                "topk": 0, "pv_threshold": null (= infinity), "dense": false, ...}, ...]}]}
nlohmann::json to_json(const HeadSettings& settings);
HeadSettings head_settings_from_json(const nlohmann::json& value, const std::string& where);
// Reads layer `layer` (default: the first) of a config file. Throws Error(Usage) with the path
// and the reason for an unreadable file, malformed JSON, or values out of range.
SparseConfig load_config(const std::string& path, int layer = 0);
SparseConfig config_from_json(const nlohmann::json& document, const std::string& source, int layer = 0);

// Kept key blocks per (batch, q head, q block): ascending block indices, count[i] valid entries
// of index[i * n_blocks ...]. Sparsity bookkeeping counts visible blocks only.
struct BlockMask {
  int batch = 0, heads = 0, m_blocks = 0, n_blocks = 0;
  std::vector<std::int32_t> count;
  std::vector<std::int32_t> index;
  std::int64_t kept_blocks() const;
  std::size_t slot(int b, int h, int m_block) const {
    return (static_cast<std::size_t>(b) * heads + h) * m_blocks + m_block;
  }
};

// The key blocks [first, last) that some row of q block m_block sees (the kernel's range).
std::pair<int, int> visible_blocks(const AttentionProblem& problem, BlockShape shape, int m_block);
// Σ over (batch, q head, q block) of the visible key blocks: the dense work in block units.
std::int64_t visible_block_count(const AttentionProblem& problem, BlockShape shape);
// Whether the problem's mask cuts through key block n_block for q block m_block (some row of
// the q block sees part of it but not all): such blocks are always kept.
bool block_is_partial(const AttentionProblem& problem, BlockShape shape, int m_block, int n_block);

// Pooled tokens of every block of one tensor: mean[(b, h, block)][d] and self-similarity.
struct PooledBlocks {
  int blocks = 0, dim = 0, heads = 0;
  std::vector<float> mean;  // (batch, heads, blocks, dim)
  std::vector<float> sim;   // (batch, heads, blocks)
};
PooledBlocks pool_blocks(const TensorView& x, int block_rows);

// The predictor on the CPU (the rule above). q/k views on the CPU, any 16/32-bit dtype.
BlockMask predict_blocks(const AttentionProblem& problem, const AttentionArgs& args, BlockShape shape,
                         const SparseConfig& config);
// The selection step alone, from pooled blocks (shared by the predictor and its tests).
BlockMask select_blocks(const AttentionProblem& problem, BlockShape shape, const SparseConfig& config,
                        const PooledBlocks& q, const PooledBlocks& k);

// A user-given mask from a spec: "band:W" (key blocks less than W blocks from the q block's
// diagonal, either side — the causal mask cuts the right side — plus block 0), "random:P" (each visible block kept with
// probability P, the diagonal always), or "file:PATH" (JSON: {"block_m": M, "block_n": N, "masks": [[[k blocks of q
// block 0], ...] per q head]}, one list per head or one for all). Throws Error(Usage) naming the bad spec.
BlockMask make_block_mask(const std::string& spec, const AttentionProblem& problem, BlockShape shape,
                          std::uint64_t seed = 0);
// Drops masked-out entries: sorts, dedups and clips every list to its visible range.
void normalize_mask(BlockMask& mask, const AttentionProblem& problem, BlockShape shape);
// The mask in tiles of `factor` key blocks (same q blocks): a tile is kept when any of its
// blocks is. The Hopper kernels (flash3, sage2's wgmma kernel) visit 128-key tiles while the
// rule selects flash2's blocks (block_shape_for: 32 keys at d128, 64 at d64), so that one tuned
// config means the same kept keys on every kernel, and the finer selection keeps the accuracy.
BlockMask coarsen_mask(const BlockMask& mask, int factor);
// Every visible block kept (sparsity 0).
BlockMask dense_mask(const AttentionProblem& problem, BlockShape shape);

// What a sparse forward did, in block units: visible blocks (the dense work), blocks whose
// Q·Kᵀ was computed, and (row group, block) pairs whose P·V was skipped of those computed.
struct SparseStats {
  std::int64_t visible_blocks = 0;
  std::int64_t computed_blocks = 0;
  std::int64_t pv_groups = 0;  // (row group, computed block) pairs
  std::int64_t pv_skipped_groups = 0;
  double predictor_ms = 0;
  double predicted_sparsity() const;  // 1 − computed / visible
  double achieved_sparsity() const;   // 1 − (Q·Kᵀ + P·V work done) / (2 × visible)
};

// The block-sparse forward on the CPU: online softmax over the kept key blocks only, fp32
// accumulation, P·V skipped per row group under each head's pv_threshold exactly as the CUDA
// kernel decides it. Writes args.o (and args.lse when given). Fills stats when not null.
void sparse_forward(const AttentionProblem& problem, const AttentionArgs& args, BlockShape shape, const BlockMask& mask,
                    const SparseConfig& config, SparseStats* stats);

}  // namespace attnsuite::sparse
