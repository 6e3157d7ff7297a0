// What the sage launchers hand the kernels: pointers, strides in elements and sizes. Plain
// data, no templates, no CUDA headers (host code fills them).
#pragma once

#include <cstdint>

#include "cuda/sage/quant_rule.hpp"

namespace attnsuite::cuda::sage {

// The consumers' schedule in the sm_90a wgmma kernel (wgmma_kernel.cuh; kernel configs
// "wgmma-serial", "wgmma-pingpong", "wgmma"): serial (each consumer GEMM → softmax → GEMM, the
// two unsynchronized), ping-pong (the two take turns at the tensor cores), overlap (ping-pong
// plus, inside a consumer, Q·K_jᵀ and P_{j-1}·V_{j-1} issued together and the softmax of tile j
// run while P_{j-1}·V_{j-1} executes: flash3 v2's schedule).
enum class Schedule : int { Serial = 0, PingPong = 1, Overlap = 2 };

// One quantization pass over a (batch, seq, heads, head_dim) 16-bit tensor.
struct QuantParams {
  const void* x = nullptr;
  std::int64_t batch_stride = 0, row_stride = 0, head_stride = 0;
  int batch = 0, heads = 0, seq = 0, head_dim = 0;

  std::int8_t* out = nullptr;  // [batch][heads][seq][head_dim]
  float* scale = nullptr;      // [batch][heads][blocks]
  // Scale blocks: block_rows consecutive rows, or, with key_groups (sage2's K), the key groups
  // of quant_rule.hpp (k_scale_index; block_rows unused).
  int block_rows = 0;
  bool key_groups = false;
  int blocks = 0;                 // ceil(seq / block_rows), or k_scale_count
  float scale_multiplier = 1.0f;  // stored scale = amax / 127 · this (softmax scale · log2 e for Q)

  // Smooth-K: per (batch, head, channel) partial sums over splits of kStatsRowsPerSplit keys;
  // the mean (sum of the splits in order, / seq) is subtracted before quantizing. Null for Q.
  const float* mean_partials = nullptr;
  int splits = 0;

  // Q only, where an LSE is asked for: smooth-K shifts every score of query row i by
  // −scale·(q_i·k̄), which leaves the softmax (and O) unchanged but moves the log-sum-exp by that
  // much; the Q pass writes lse_shift[row] = shift_scale·(q_i·k̄) (k̄: the mean the K quantizer
  // subtracts, from k_sum, [batch][heads_kv][splits][head_dim], of the q head's kv head) and the
  // attention kernel adds it to the LSE it writes. (Before 2026-12-04's fourth session a pass of
  // its own read Q again for this after the kernel: 52–58 µs per forward at B·N = 16k, d128.)
  float* lse_shift = nullptr;  // [batch][heads][seq]
  const float* k_sum = nullptr;
  int group_size = 1, seq_kv = 0;
  float shift_scale = 1.0f;  // the softmax scale (natural-log units, as the LSE)
};

// The statistics pass over K (and V for sage2): partial channel sums of K and partial channel
// amax bit patterns of V per split of kStatsRowsPerSplit keys.
struct StatsParams {
  const void* k = nullptr;
  std::int64_t k_batch_stride = 0, k_row_stride = 0, k_head_stride = 0;
  const void* v = nullptr;  // null: no V statistics (sage)
  std::int64_t v_batch_stride = 0, v_row_stride = 0, v_head_stride = 0;
  int batch = 0, heads = 0, seq = 0, head_dim = 0, splits = 0;
  float* k_sum = nullptr;           // [batch][heads][splits][head_dim]
  std::uint32_t* v_amax = nullptr;  // [batch][heads][splits][head_dim], |v| bit patterns
};

// V → FP8 e4m3, per channel, transposed: vt[batch][heads][head_dim][padded keys].
struct VQuantParams {
  const void* v = nullptr;
  std::int64_t batch_stride = 0, row_stride = 0, head_stride = 0;
  int batch = 0, heads = 0, seq = 0, head_dim = 0, splits = 0;
  const std::uint32_t* v_amax = nullptr;  // the statistics partials
  std::uint8_t* vt = nullptr;
  std::int64_t padded_keys = 0;
  float* v_scale = nullptr;  // [batch][heads][head_dim] = amax / 448
};

// The attention kernel.
struct Params {
  const std::int8_t* q8 = nullptr;  // [batch][heads_q][seq_q][head_dim]
  const std::int8_t* k8 = nullptr;  // [batch][heads_kv][seq_kv][head_dim]
  const float* q_scale = nullptr;   // [batch][heads_q][q_blocks], softmax scale · log2 e folded in
  const float* k_scale = nullptr;   // [batch][heads_kv][k_blocks]
  int q_blocks = 0, k_blocks = 0;

  // sage: V as given (16-bit, strided); sage2: the transposed FP8 V and its channel scales.
  const void* v = nullptr;
  std::int64_t v_batch_stride = 0, v_row_stride = 0, v_head_stride = 0;
  const std::uint8_t* vt8 = nullptr;
  const float* v_scale = nullptr;
  std::int64_t v_keys = 0;  // padded key count of vt8

  void* o = nullptr;  // (batch, seq_q, heads_q, head_dim), the input dtype
  std::int64_t o_batch_stride = 0, o_row_stride = 0, o_head_stride = 0;
  float* lse = nullptr;              // (batch, heads_q, seq_q), natural log; may be null
  const float* lse_shift = nullptr;  // (batch, heads_q, seq_q), added to the LSE (QuantParams::lse_shift)

  int batch = 0, heads_q = 0, heads_kv = 0, group_size = 1, seq_q = 0, seq_kv = 0, head_dim = 0;
  // Bottom-right aligned mask as flash2 (cuda/common/key_range.cuh); causal folded in.
  int window_left = -1;
  int window_right = -1;

  // Block-sparse (`sparge-sage`; the sm_90a wgmma kernel only): as flash3::Params, the q tile
  // m of (batch, q head) visits only the key tiles block_index[slot · n_blocks + i], i <
  // block_count[slot], slot = (batch · heads_q + q head) · m_blocks + m; tiles 128 × 128. Null: dense.
  const int* block_index = nullptr;
  const int* block_count = nullptr;
  int m_blocks = 0, n_blocks = 0;
};

}  // namespace attnsuite::cuda::sage
