// The quantization rules of `sage` and `sage2`, written once for the GPU kernels (quant.cu) and
// the host reference (quant_reference.hpp, which the CPU tests check): scale-block sizes, the
// INT8 rule, the FP8 e4m3 rule, the key permutation of the transposed FP8 V, and the
// workspace layout. No CUDA headers: host code includes it too.
//
// Defined behaviour at the edges (docs/kernels/sage.md, "Edge cases"):
//   - amax is the largest |x| of a block compared as IEEE bit patterns, so NaN > inf > finite:
//     a block holding a NaN gets a NaN scale, one holding an inf (and no NaN) an inf scale;
//   - inverse scale = 127 / amax (448 / amax for FP8) when amax > 0, else 0: an all-zero block
//     has scale 0 and quantizes to zeros; a NaN or inf block quantizes to zeros too, and its
//     non-finite scale carries the NaN into every score (and so every output row) it touches;
//   - x · inverse that is NaN (inf · 0) quantizes to 0; everything else rounds to nearest even
//     and saturates at ±127 (INT8) or ±448 (e4m3, satfinite: inf → ±448, NaN → NaN).
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define ATTNSUITE_SAGE_HD __host__ __device__
#else
#define ATTNSUITE_SAGE_HD
#endif

namespace attnsuite::cuda::sage {

// The two kernels. Sage: INT8 Q·Kᵀ, 16-bit P·V. Sage2: INT8 Q·Kᵀ, FP8 e4m3 P·V.
enum class Mode : int { Sage = 0, Sage2 = 1 };

// Rows of Q (keys of K) that share one fp32 scale. sage: one scale per Q tile of the kernel
// (128 rows) and per K tile (64 keys at d64, 32 at d128: the kernel's kTileN); sage2: one per
// Q row — the thread group (quad of lanes) that holds the row's scores — and one per 8-key mma
// tile (the keys one n8 fragment holds). Per row rather than per 16-row warp tile: on heavy-q
// the emulated rel L1 of sage2 at d128 fell from 0.051 to 0.039 (test_sage_quant.cpp).
ATTNSUITE_SAGE_HD constexpr int q_block_rows(Mode mode) { return mode == Mode::Sage ? 128 : 1; }
// K, sage: blocks of consecutive keys (64 at d64, 32 at d128).
ATTNSUITE_SAGE_HD constexpr int k_block_rows(Mode mode, int head_dim) {
  return mode == Mode::Sage2 ? 8 : (head_dim == 64 ? 64 : 32);
}
// K, sage2 (v6): key groups aligned with the accumulator fragment — one group per 128-key tile
// and key class (key % 8) / 2, the 32 keys whose scores one thread holds (columns 8i + 2·(lane %
// 4) + e of wgmma m64nN and of mma.sync m16n8 alike; SageAttention2's "per-thread" grouping).
// A thread then has one K scale per tile, so the row maximum can be taken on the INT8 dot
// products and dequantize + exponent fuse into one FFMA (wgmma_kernel.cuh). v4 used these
// groups for sage too: slower there (its 32-key blocks already gave 4 factors per tile) and its
// d64 peaked LSE error rose from 0.088 to 0.101 (docs/kernels/history/sage.md, v4) — so sage keeps blocks.
inline constexpr int kKGroupTileKeys = 128;
inline constexpr int kKGroupsPerTile = 4;
ATTNSUITE_SAGE_HD constexpr bool k_key_groups(Mode mode) { return mode == Mode::Sage2; }
// The K scale of `key`, and how many scales `keys` keys have, for either rule.
ATTNSUITE_SAGE_HD constexpr int k_scale_index(Mode mode, int head_dim, int key) {
  return k_key_groups(mode) ? key / kKGroupTileKeys * kKGroupsPerTile + key % 8 / 2
                            : key / k_block_rows(mode, head_dim);
}
ATTNSUITE_SAGE_HD constexpr int k_scale_count(Mode mode, int head_dim, int keys) {
  return k_key_groups(mode) ? (keys + kKGroupTileKeys - 1) / kKGroupTileKeys * kKGroupsPerTile
                            : (keys + k_block_rows(mode, head_dim) - 1) / k_block_rows(mode, head_dim);
}
// Rows per CTA of the Q/K quantization kernel: a multiple of every block size above, and
// exactly one tile of key groups.
inline constexpr int kQuantRowsPerCta = 128;
inline constexpr int kQuantRowsPerCtaBits = 7;
static_assert(kQuantRowsPerCta == 1 << kQuantRowsPerCtaBits && kQuantRowsPerCta == kKGroupTileKeys,
              "a K quantization CTA holds exactly the keys of its groups");
// The scale blocks inside one such CTA, for either rule: CTA row r (0 .. 127) is in block
// (r >> shift) & (blocks − 1) — consecutive blocks of 2^shift rows (shift + bits = 7), or the key
// groups ((r >> 1) & 3) — and block b's rows are row(b, i), i < rows_per_block(). The CTA's
// first block is row_begin / 128 · blocks (k_scale_index and q_block_rows agree:
// test_sage_quant.cpp). One shift and mask per row: v6's first form (a branch and a division per
// row) made the pass 15% slower on the H200 (2026-12-04 A/B: Q 59 → 70 µs, K 48 → 56 µs at B4
// H16 N4k d128).
struct CtaBlocks {
  int shift = 0, bits = 0;
  ATTNSUITE_SAGE_HD constexpr int blocks() const { return 1 << bits; }
  ATTNSUITE_SAGE_HD constexpr int rows_per_block() const { return kQuantRowsPerCta >> bits; }
  ATTNSUITE_SAGE_HD constexpr int block_of(int r) const { return (r >> shift) & (blocks() - 1); }
  ATTNSUITE_SAGE_HD constexpr int row(int b, int i) const {
    return ((i >> shift) << (shift + bits)) | (b << shift) | (i & ((1 << shift) - 1));
  }
};
// key_groups: sage2's K; else blocks of block_rows (a power of two dividing 128) rows.
ATTNSUITE_SAGE_HD constexpr CtaBlocks cta_blocks(bool key_groups, int block_rows) {
  if (key_groups) return {1, 2};
  int shift = 0;
  while ((1 << shift) < block_rows) ++shift;
  return {shift, kQuantRowsPerCtaBits - shift};
}
static_assert(cta_blocks(true, 0).blocks() == kKGroupsPerTile, "one CTA holds one tile of key groups");
// Keys per partial sum of the K-mean / V-amax statistics kernel.
inline constexpr int kStatsRowsPerSplit = 256;
// The transposed FP8 V is padded to a multiple of this many keys (zeros).
inline constexpr int kVKeyPad = 64;
// FP8 e4m3's largest finite value: P ∈ [0, 1] is stored as P·448, V per channel as V·448/amax.
inline constexpr float kFp8Max = 448.0f;
inline constexpr float kInt8Max = 127.0f;

ATTNSUITE_SAGE_HD inline std::uint32_t float_bits(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(x);
#else
  std::uint32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  return bits;
#endif
}
ATTNSUITE_SAGE_HD inline float bits_float(std::uint32_t bits) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(bits);
#else
  float x;
  std::memcpy(&x, &bits, sizeof x);
  return x;
#endif
}
// |x| as bits: unsigned comparison of these orders NaN above inf above every finite value.
ATTNSUITE_SAGE_HD inline std::uint32_t abs_bits(float x) { return float_bits(x) & 0x7fffffffu; }

// 127 / amax, or 0 for amax = 0, NaN (NaN > 0 is false) and inf (127 / inf = 0).
ATTNSUITE_SAGE_HD inline float int8_inverse_scale(float amax) { return amax > 0.0f ? kInt8Max / amax : 0.0f; }
ATTNSUITE_SAGE_HD inline float fp8_inverse_scale(float amax) { return amax > 0.0f ? kFp8Max / amax : 0.0f; }

// round-to-nearest-even(x · inverse) saturated to [-127, 127]; 0 where the product is NaN.
ATTNSUITE_SAGE_HD inline std::int8_t quantize_int8(float x, float inverse) {
  const float v = x * inverse;
  if (!(v == v)) return 0;
#if defined(__CUDA_ARCH__)
  const float r = rintf(v);
#else
  const float r = std::nearbyint(v);  // the default rounding mode: to nearest, ties to even
#endif
  return static_cast<std::int8_t>(r > kInt8Max ? kInt8Max : (r < -kInt8Max ? -kInt8Max : r));
}

// An INT8 dot product (|x| < 2^22: at most 127² · 256) as a float, without I2F (the int → float
// conversion runs at 16 per clock per SM on sm_80–sm_90, a quarter of FP32 math, and the
// kernel converts every score): adding x to the bits of 1.5 · 2^23 puts it in the mantissa,
// giving the float 1.5 · 2^23 + x exactly; subtracting 1.5 · 2^23 is exact too.
inline constexpr std::int32_t kMagicFloatBits = 0x4B400000;  // 12582912.0f = 1.5 · 2^23
ATTNSUITE_SAGE_HD inline float int_to_float_exact(std::int32_t x) {
  return bits_float(static_cast<std::uint32_t>(x + kMagicFloatBits)) - 12582912.0f;
}

// Host model of float → e4m3 (OCP "e4m3fn", round to nearest even, saturating to ±448, as
// cvt.rn.satfinite.e4m3x2.f32): attnsuite::float_to_e4m3_bits / e4m3_bits_to_float
// (attnsuite/dtype.hpp), which quant_reference.hpp uses.

// Position of key `key` (relative to the start of the tile) in a row of the transposed FP8 V.
// P·V runs m16n8k32 FP8 MMAs whose A operand is P straight from the Q·Kᵀ accumulators: lane
// (quad_row, quad_col) holds the scores of keys 2c, 2c+1, 8+2c, 9+2c (c = quad_col) of each 16
// keys, where the A fragment wants k-indices 4c .. 4c+3. Storing V's keys in that order instead
// makes the product the same sum over keys with no shuffle of P: k-index 4c + j of a 16-key
// half holds key 8·(j/2) + 2c + j%2.
ATTNSUITE_SAGE_HD constexpr int v_key_position(int key) {
  const int block = key / 16 * 16, k = key % 16;
  const int c = (k % 8) / 2, j = (k / 8) * 2 + k % 2;
  return block + 4 * c + j;
}

// Padded key count of the transposed FP8 V.
ATTNSUITE_SAGE_HD constexpr std::int64_t v_padded_keys(std::int64_t seq_kv) {
  return (seq_kv + kVKeyPad - 1) / kVKeyPad * kVKeyPad;
}

// Where each quantized tensor lives in the one workspace buffer (byte offsets, 256-aligned).
//   q8     int8  [batch][heads_q][seq_q][head_dim]
//   k8     int8  [batch][heads_kv][seq_kv][head_dim]
//   q_scale fp32 [batch][heads_q][ceil(seq_q / q_block_rows)] (· softmax scale · log2 e)
//   k_scale fp32 [batch][heads_kv][k_scale_count(mode, head_dim, seq_kv)]
//   k_sum / v_amax  fp32 / u32 [batch][heads_kv][splits][head_dim]: the statistics partials
//   vt8    e4m3  [batch][heads_kv][head_dim][v_padded_keys] (sage2; keys permuted per 16)
//   v_scale fp32 [batch][heads_kv][head_dim] (sage2)
//   lse_shift fp32 [batch][heads_q][seq_q]: smooth-K's LSE shift per query row
struct WorkspaceLayout {
  std::size_t q8 = 0, k8 = 0, q_scale = 0, k_scale = 0, k_sum = 0, v_amax = 0, vt8 = 0, v_scale = 0, lse_shift = 0;
  std::size_t bytes = 0;
  int q_blocks = 0, k_blocks = 0, splits = 0;
  std::int64_t v_keys = 0;
};

inline WorkspaceLayout workspace_layout(Mode mode, int batch, int heads_q, int heads_kv, int seq_q, int seq_kv,
                                        int head_dim) {
  WorkspaceLayout l;
  l.q_blocks = (seq_q + q_block_rows(mode) - 1) / q_block_rows(mode);
  l.k_blocks = k_scale_count(mode, head_dim, seq_kv);
  l.splits = (seq_kv + kStatsRowsPerSplit - 1) / kStatsRowsPerSplit;
  l.v_keys = mode == Mode::Sage2 ? v_padded_keys(seq_kv) : 0;
  const auto b = static_cast<std::size_t>(batch), hq = static_cast<std::size_t>(heads_q),
             hkv = static_cast<std::size_t>(heads_kv), d = static_cast<std::size_t>(head_dim);
  std::size_t at = 0;
  auto take = [&at](std::size_t bytes) {
    const std::size_t offset = at;
    at += (bytes + 255) / 256 * 256;
    return offset;
  };
  l.q8 = take(b * hq * static_cast<std::size_t>(seq_q) * d);
  l.k8 = take(b * hkv * static_cast<std::size_t>(seq_kv) * d);
  l.q_scale = take(b * hq * static_cast<std::size_t>(l.q_blocks) * 4);
  l.k_scale = take(b * hkv * static_cast<std::size_t>(l.k_blocks) * 4);
  l.k_sum = take(b * hkv * static_cast<std::size_t>(l.splits) * d * 4);
  l.lse_shift = take(b * hq * static_cast<std::size_t>(seq_q) * 4);
  if (mode == Mode::Sage2) {
    l.v_amax = take(b * hkv * static_cast<std::size_t>(l.splits) * d * 4);
    l.vt8 = take(b * hkv * d * static_cast<std::size_t>(l.v_keys));
    l.v_scale = take(b * hkv * d * 4);
  }
  l.bytes = at;
  return l;
}

}  // namespace attnsuite::cuda::sage
