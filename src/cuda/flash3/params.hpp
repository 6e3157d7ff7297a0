// What the flash3 launcher hands the kernel besides the three TMA descriptors: pointers, strides
// in elements and sizes. Plain data, no templates and no CUDA headers; the same conventions as
// flash2's Params (src/cuda/flash2/params.hpp).
#pragma once

#include <cstdint>

namespace attnsuite::cuda::flash3 {

struct Params {
  // Q, K and V are read through TMA descriptors built from these pointers and strides; O and
  // LSE are written directly.
  const void* q = nullptr;  // (batch, seq_q, heads_q, head_dim), last dim contiguous
  const void* k = nullptr;  // (batch, seq_kv, heads_kv, head_dim)
  const void* v = nullptr;  // (batch, seq_kv, heads_kv, head_dim)
  void* o = nullptr;        // (batch, seq_q, heads_q, head_dim), same dtype as q
  float* lse = nullptr;     // (batch, heads_q, seq_q) dense, natural log; may be null

  std::int64_t q_batch_stride = 0, q_row_stride = 0, q_head_stride = 0;
  std::int64_t k_batch_stride = 0, k_row_stride = 0, k_head_stride = 0;
  std::int64_t v_batch_stride = 0, v_row_stride = 0, v_head_stride = 0;
  std::int64_t o_batch_stride = 0, o_row_stride = 0, o_head_stride = 0;

  int batch = 0;
  int heads_q = 0;
  int heads_kv = 0;
  int group_size = 1;  // heads_q / heads_kv: q head h reads kv head h / group_size
  int seq_q = 0;
  int seq_kv = 0;
  int head_dim = 0;

  float scale = 0.0f;       // softmax scale, for the natural-log LSE
  float scale_log2 = 0.0f;  // scale · log2(e): the kernel's exponentials are exp2

  // Bottom-right aligned mask (AttentionProblem::key_begin/key_end): query i keeps keys in
  // [diag - window_left, diag + window_right] with diag = i + seq_kv - seq_q; -1 = unbounded.
  // Causal is window_right = min(window_right, 0), folded in by the host.
  int window_left = -1;
  int window_right = -1;

  // Consumer schedule (docs/kernels/history/flash3.md, v1 and v2): false = v2, the default (Q·Kᵀ of
  // tile j+1 issued before the softmax of tile j, ping-pong between the two consumers); true =
  // v1 (one tile at a time, both GEMMs waited), kept as kernel config "v1" to measure against.
  bool serial_schedule = false;

  // Persistent CTAs (the default since v4, docs/kernels/flash3.md): the launcher starts
  // min(works, SMs) CTAs that each loop over works b, b + grid, ...; false (kernel config "grid"):
  // one CTA per work, as up to v3. q_tiles and works are filled in by the launcher.
  bool persistent = true;
  int q_tiles = 0;  // ⌈seq_q / kTileM⌉
  int works = 0;    // q_tiles · heads_q · batch

  // Block-sparse (`sparge` / `block-sparse` on sm_90a, src/cuda/sparge/): when block_index is
  // set, the CTA of q tile m visits only the key tiles block_index[slot · n_blocks + i] for
  // i < block_count[slot] (ascending, inside the tile's visible range; slot = (batch · heads_q
  // + q head) · m_blocks + m) instead of every visible one: the skipped tiles are neither
  // loaded nor multiplied. Blocks are the kernel's tiles, kTileM × kTileN = 128 × 128 (the
  // 128-row configs only: not m192). Null: dense.
  const int* block_index = nullptr;
  const int* block_count = nullptr;
  int m_blocks = 0, n_blocks = 0;
};

}  // namespace attnsuite::cuda::flash3
