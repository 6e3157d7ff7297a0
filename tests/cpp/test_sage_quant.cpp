// sage's quantization rules on the CPU (cuda/sage/quant_rule.hpp, quant_reference.hpp): round
// trips, scale edge cases, all-zero blocks, non-finite input, the e4m3 conversion, the key
// permutation of the FP8 V, smooth-K, and the accuracy of the whole quantized attention
// (emulated in fp64 around the quantization steps) on every generator, against the bounds the
// GPU kernels are held to. No GPU needed.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "attnsuite/attnsuite.hpp"
#include "bench/generators.hpp"
#include "cuda/hopper/fp8_layout.hpp"
#include "cuda/sage/quant_reference.hpp"
#include "cuda/sage/quant_rule.hpp"
#include "sage_bounds.hpp"

namespace attnsuite {
namespace {

using namespace cuda::sage;

std::vector<float> randn(std::size_t n, std::uint64_t seed, float sigma = 1.0f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(0.0f, sigma);
  std::vector<float> out(n);
  for (float& x : out) x = dist(rng);
  return out;
}

TEST(SageQuant, Int8RoundTripIsWithinHalfAStep) {
  const int rows = 300, d = 64, block = 16;
  const std::vector<float> x = randn(static_cast<std::size_t>(rows) * d, 1, 3.0f);
  const reference::QuantizedRows q = reference::quantize_rows(x.data(), rows, d, block, 1.0f);
  ASSERT_EQ(q.scales.size(), static_cast<std::size_t>((rows + block - 1) / block));
  for (int r = 0; r < rows; ++r) {
    const float scale = q.scales[static_cast<std::size_t>(r / block)];
    ASSERT_GT(scale, 0.0f);
    for (int c = 0; c < d; ++c) {
      const std::size_t i = static_cast<std::size_t>(r) * d + c;
      const double back = q.values[i] * static_cast<double>(scale);
      // Half a step, plus the rounding of x · (127 / amax) in fp32.
      EXPECT_LE(std::abs(back - x[i]), 0.5 * scale * (1.0 + 1e-5)) << "row " << r << " col " << c;
    }
  }
}

TEST(SageQuant, Int8ScaleEdgeCases) {
  // The largest |x| maps to ±127 exactly; the scale multiplier does not change the values.
  const std::vector<float> x = {-2.0f, 1.0f, 0.5f, 2.0f, 1e-30f, -1e-30f, 0.0f, 1.0f / 254.0f};
  const reference::QuantizedRows q = reference::quantize_rows(x.data(), 1, 8, 8, 0.25f);
  EXPECT_EQ(q.values[0], -127);
  EXPECT_EQ(q.values[3], 127);
  EXPECT_EQ(q.values[1], 64);  // 63.5 → 64: ties to even
  EXPECT_EQ(q.values[2], 32);  // 31.75 → 32
  EXPECT_EQ(q.values[4], 0);
  EXPECT_EQ(q.values[5], 0);
  EXPECT_EQ(q.values[6], 0);
  EXPECT_EQ(q.values[7], 0);  // 0.25 → 0
  EXPECT_FLOAT_EQ(q.scales[0], 2.0f / 127.0f * 0.25f);
  // Ties to even on both sides of zero, and saturation.
  EXPECT_EQ(quantize_int8(2.5f, 1.0f), 2);
  EXPECT_EQ(quantize_int8(-2.5f, 1.0f), -2);
  EXPECT_EQ(quantize_int8(3.5f, 1.0f), 4);
  EXPECT_EQ(quantize_int8(1000.0f, 1.0f), 127);
  EXPECT_EQ(quantize_int8(-1000.0f, 1.0f), -127);  // symmetric: -128 is never produced
  // A block whose amax is below 127 / FLT_MAX (subnormal): the inverse overflows to inf, so its
  // non-zero values saturate to ±127 with their sign and zeros stay 0 — never NaN.
  const std::vector<float> tiny = {1e-40f, -5e-41f, 0.0f};
  const reference::QuantizedRows t = reference::quantize_rows(tiny.data(), 1, 3, 1, 1.0f);
  EXPECT_EQ(t.values[0], 127);
  EXPECT_EQ(t.values[1], -127);
  EXPECT_EQ(t.values[2], 0);
  EXPECT_GT(t.scales[0], 0.0f);
}

TEST(SageQuant, AllZeroBlocksGiveScaleZeroAndZeros) {
  std::vector<float> x(static_cast<std::size_t>(32) * 8, 0.0f);
  for (int c = 0; c < 8; ++c) x[static_cast<std::size_t>(20) * 8 + c] = 1.0f;  // block 2 of 8-row blocks
  const reference::QuantizedRows q = reference::quantize_rows(x.data(), 32, 8, 8, 1.0f);
  EXPECT_EQ(q.scales[0], 0.0f);
  EXPECT_EQ(q.scales[1], 0.0f);
  EXPECT_GT(q.scales[2], 0.0f);
  EXPECT_EQ(q.scales[3], 0.0f);
  for (std::size_t i = 0; i < x.size(); ++i) {
    EXPECT_EQ(q.values[i], i / 8 == 20 ? 127 : 0) << i;
    EXPECT_FALSE(std::isnan(q.values[i] * q.scales[i / 64]));
  }
  // FP8 V: an all-zero channel has scale 0 and zeros.
  std::vector<float> v(static_cast<std::size_t>(70) * 2, 0.0f);
  for (int j = 0; j < 70; ++j) v[static_cast<std::size_t>(j) * 2 + 1] = static_cast<float>(j);
  const reference::QuantizedVt vt = reference::quantize_v(v.data(), 70, 2);
  EXPECT_EQ(vt.padded_keys, 128);
  EXPECT_EQ(vt.scales[0], 0.0f);
  EXPECT_FLOAT_EQ(vt.scales[1], 69.0f / 448.0f);
  for (std::int64_t j = 0; j < vt.padded_keys; ++j) EXPECT_EQ(vt.values[static_cast<std::size_t>(j)], 0);
}

TEST(SageQuant, NonFiniteInputGivesANonFiniteScaleAndZeros) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  // Three blocks of 2 rows × 2: NaN in block 0, -inf in block 1, finite block 2.
  const std::vector<float> x = {1.0f, nan, 3.0f, 4.0f, -inf, 1.0f, 2.0f, 5.0f, 1.0f, -2.0f, 0.5f, 0.25f};
  const reference::QuantizedRows q = reference::quantize_rows(x.data(), 6, 2, 2, 1.0f);
  EXPECT_TRUE(std::isnan(q.scales[0]));
  EXPECT_TRUE(std::isinf(q.scales[1]));
  EXPECT_FLOAT_EQ(q.scales[2], 2.0f / 127.0f);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(q.values[static_cast<std::size_t>(i)], 0) << i;
  EXPECT_EQ(q.values[8], 64);  // 63.5 → 64
  EXPECT_EQ(q.values[9], -127);
  // So every score the block touches is NaN: value · scale with scale NaN, or 0 · inf.
  EXPECT_TRUE(std::isnan(q.values[0] * q.scales[0]));
  EXPECT_TRUE(std::isnan(q.values[4] * q.scales[1]));
  // NaN outranks inf in a block holding both.
  const std::vector<float> both = {inf, nan};
  EXPECT_TRUE(std::isnan(reference::quantize_rows(both.data(), 1, 2, 1, 1.0f).scales[0]));
  // FP8 V: a channel with inf has scale inf; its values are NaN (inf · 0) or 0.
  const std::vector<float> v = {1.0f, inf, -2.0f, 3.0f};
  const reference::QuantizedVt vt = reference::quantize_v(v.data(), 2, 2);
  EXPECT_FLOAT_EQ(vt.scales[0], 2.0f / 448.0f);
  EXPECT_TRUE(std::isinf(vt.scales[1]));
}

TEST(SageQuant, IntToFloatByTheExponentTrickIsExact) {
  const std::int32_t edge = 127 * 127 * 256;
  for (std::int32_t x :
       {0, 1, -1, 2, -2, 12345, -54321, 127 * 127 * 128, -127 * 127 * 128, edge, -edge, (1 << 22) - 1, -(1 << 22)})
    EXPECT_EQ(int_to_float_exact(x), static_cast<float>(x)) << x;
  std::mt19937 rng(3);
  std::uniform_int_distribution<std::int32_t> dist(-edge, edge);
  for (int i = 0; i < 100000; ++i) {
    const std::int32_t x = dist(rng);
    ASSERT_EQ(int_to_float_exact(x), static_cast<float>(x)) << x;
  }
}

TEST(SageQuant, E4m3ConversionMatchesTheFormat) {
  EXPECT_EQ(float_to_e4m3_bits(0.0f), 0x00);
  EXPECT_EQ(float_to_e4m3_bits(-0.0f), 0x80);
  EXPECT_EQ(float_to_e4m3_bits(1.0f), 0x38);
  EXPECT_EQ(float_to_e4m3_bits(-1.0f), 0xB8);
  EXPECT_EQ(float_to_e4m3_bits(448.0f), 0x7E);
  EXPECT_EQ(float_to_e4m3_bits(1e6f), 0x7E);  // satfinite
  EXPECT_EQ(float_to_e4m3_bits(std::numeric_limits<float>::infinity()), 0x7E);
  EXPECT_EQ(float_to_e4m3_bits(-std::numeric_limits<float>::infinity()), 0xFE);
  EXPECT_EQ(float_to_e4m3_bits(std::nanf("")) & 0x7F, 0x7F);
  EXPECT_EQ(float_to_e4m3_bits(std::ldexp(1.0f, -9)), 0x01);   // smallest subnormal
  EXPECT_EQ(float_to_e4m3_bits(std::ldexp(1.0f, -10)), 0x00);  // tie → even (0)
  EXPECT_EQ(float_to_e4m3_bits(std::ldexp(3.0f, -10)), 0x02);  // 1.5 steps → 2
  EXPECT_EQ(float_to_e4m3_bits(1.0625f), 0x38);                // tie between 1 and 1.125 → even
  EXPECT_EQ(float_to_e4m3_bits(1.1875f), 0x3A);                // tie between 1.125 and 1.25 → even
  EXPECT_EQ(float_to_e4m3_bits(464.0f), 0x7E);                 // above 448 saturates
  // Every finite code decodes and re-encodes to itself; midpoints round to the even neighbour.
  for (int code = 0; code < 256; ++code) {
    if ((code & 0x7F) == 0x7F) {
      EXPECT_TRUE(std::isnan(e4m3_bits_to_float(static_cast<std::uint8_t>(code))));
      continue;
    }
    const float value = e4m3_bits_to_float(static_cast<std::uint8_t>(code));
    EXPECT_EQ(float_to_e4m3_bits(value), code) << code;
    if ((code & 0x7F) < 0x7E) {
      const float next = e4m3_bits_to_float(static_cast<std::uint8_t>(code + 1));
      const int even = (code & 1) == 0 ? code : code + 1;
      EXPECT_EQ(float_to_e4m3_bits(0.5f * (value + next)), even) << code;
    }
  }
  // Relative rounding error of normal values: at most 2^-4.
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> dist(0.02f, 440.0f);
  for (int i = 0; i < 10000; ++i) {
    const float x = dist(rng);
    const float back = e4m3_bits_to_float(float_to_e4m3_bits(x));
    EXPECT_LE(std::abs(back - x), x * 0.0625f) << x;
  }
}

// The FP8 P·V's A operand (P straight from the Q·Kᵀ accumulators) holds, in lane column c,
// the keys {2c, 2c+1, 8+2c, 9+2c} of each 16 at k-indices 4c..4c+3: V's key order must match.
TEST(SageQuant, VKeyPermutationMatchesTheMmaFragments) {
  std::set<int> positions;
  for (int key = 0; key < kVKeyPad; ++key) positions.insert(v_key_position(key));
  EXPECT_EQ(positions.size(), static_cast<std::size_t>(kVKeyPad));
  EXPECT_EQ(*positions.begin(), 0);
  EXPECT_EQ(*positions.rbegin(), kVKeyPad - 1);
  for (int half = 0; half < kVKeyPad / 16; ++half)
    for (int c = 0; c < 4; ++c) {
      const int keys[4] = {2 * c, 2 * c + 1, 8 + 2 * c, 9 + 2 * c};
      for (int j = 0; j < 4; ++j) EXPECT_EQ(v_key_position(16 * half + keys[j]), 16 * half + 4 * c + j);
    }
}

// sage2's wgmma kernel (wgmma_kernel.cuh) packs P into the k32 A fragments in flash3-fp8's
// order (fp8_layout.hpp: A column s of a 128-key tile carries key key_of_column(s); the
// Flash3Fp8Layout tests tie that to the PTX fragment layouts) and TMA-loads the quantizer's Vᵀ
// as is: the column at which the quantizer stores each key must be the column that stands for it.
TEST(SageQuant, TransposedVKeyOrderIsTheWgmmaPOrder) {
  constexpr int kTileKeys = 128;  // the wgmma kernel's kTileN; a multiple of kVKeyPad
  static_assert(kTileKeys % kVKeyPad == 0);
  for (int key = 0; key < kTileKeys; ++key) {
    const int column = key / kVKeyPad * kVKeyPad + v_key_position(key % kVKeyPad);
    EXPECT_EQ(cuda::hopper::fp8_layout::key_of_column(column), key) << "key " << key;
  }
}

// The wgmma kernel's dequantization, IADD + FFMA: s = fma(float(bits(x) + 1.5·2^23), c,
// −1.5·2^23·c) for an INT8 dot product x and scale c, against x·c in fp64: off by at most
// 0.75·c (the rounding of 1.5·2^23·c) plus the final rounding; exactly 0 for c = 0.
TEST(SageQuant, FusedDequantizationIsWithinOneIntegerStep) {
  std::mt19937 rng(11);
  const std::int32_t edge = 127 * 127 * 128;
  std::uniform_int_distribution<std::int32_t> dots(-edge, edge);
  std::uniform_real_distribution<float> exponents(-30.0f, 10.0f);
  double worst_steps = 0.0;
  for (int i = 0; i < 200000; ++i) {
    const std::int32_t x = dots(rng);
    const float c = std::exp2(exponents(rng));
    const float fused = std::fma(bits_float(static_cast<std::uint32_t>(x + kMagicFloatBits)), c, -12582912.0f * c);
    const double exact = static_cast<double>(x) * c;
    const double error = std::abs(fused - exact) - std::abs(exact) * std::ldexp(1.0, -24);
    worst_steps = std::max(worst_steps, error / c);
  }
  EXPECT_LE(worst_steps, 0.76);  // analytic: 0.75 (half an ulp of 1.5·2^23·c, worst at c = 4/3·2^k); measured 0.749
  std::printf("  fused dequantization: worst error %.3f integer steps (beyond the final rounding)\n", worst_steps);
  EXPECT_EQ(std::fma(bits_float(static_cast<std::uint32_t>(12345 + kMagicFloatBits)), 0.0f, -12582912.0f * 0.0f), 0.0f);
}

// sage2's K groups (v6): the 32 keys of a 128-key tile whose scores one thread holds — columns
// 8i + 2·(lane % 4) + e of the accumulator — share one scale; sage keeps consecutive blocks.
// The quantization kernel's CTA-local blocks (CtaBlocks, quant.cu) are the rules' blocks: for Q
// (q_block_rows) and K (k_scale_index) of both modes and head dims, CTA row r of CTA t is in
// global block t · blocks + block_of(r), and row(b, ·) lists exactly the rows of block b.
TEST(SageQuant, CtaBlocksAreTheRulesBlocks) {
  for (const Mode mode : {Mode::Sage, Mode::Sage2})
    for (const int d : {64, 128})
      for (const bool is_k : {false, true}) {
        SCOPED_TRACE(std::string(mode == Mode::Sage ? "sage" : "sage2") + " d" + std::to_string(d) +
                     (is_k ? " K" : " Q"));
        const int block_rows = is_k ? k_block_rows(mode, d) : q_block_rows(mode);
        const CtaBlocks layout = cta_blocks(is_k && k_key_groups(mode), block_rows);
        EXPECT_EQ(layout.blocks() * layout.rows_per_block(), kQuantRowsPerCta);
        for (int cta = 0; cta < 3; ++cta)
          for (int r = 0; r < kQuantRowsPerCta; ++r) {
            const int row = cta * kQuantRowsPerCta + r;
            const int rule = is_k ? k_scale_index(mode, d, row) : row / q_block_rows(mode);
            ASSERT_EQ(cta * layout.blocks() + layout.block_of(r), rule) << "row " << row;
          }
        std::vector<int> seen(kQuantRowsPerCta, 0);
        for (int b = 0; b < layout.blocks(); ++b)
          for (int i = 0; i < layout.rows_per_block(); ++i) {
            const int r = layout.row(b, i);
            ASSERT_GE(r, 0);
            ASSERT_LT(r, kQuantRowsPerCta);
            EXPECT_EQ(layout.block_of(r), b) << "row(" << b << ", " << i << ") = " << r;
            ++seen[static_cast<std::size_t>(r)];
          }
        EXPECT_EQ(std::count(seen.begin(), seen.end(), 1), kQuantRowsPerCta) << "every row in exactly one block";
      }
}

TEST(SageQuant, Sage2KeyGroupsAreOneThreadsColumnsOfATile) {
  for (const int d : {64, 128})
    for (int tile = 0; tile < 3; ++tile)
      for (int lane = 0; lane < 32; ++lane) {
        std::set<int> groups;
        for (int i = 0; i < 16; ++i)
          for (int e = 0; e < 2; ++e)
            groups.insert(k_scale_index(Mode::Sage2, d, tile * 128 + 8 * i + 2 * (lane % 4) + e));
        ASSERT_EQ(groups.size(), 1u);
        EXPECT_EQ(*groups.begin(), tile * 4 + lane % 4);
      }
  EXPECT_EQ(k_scale_count(Mode::Sage2, 128, 1), 4);
  EXPECT_EQ(k_scale_count(Mode::Sage2, 128, 128), 4);
  EXPECT_EQ(k_scale_count(Mode::Sage2, 64, 129), 8);
  EXPECT_EQ(k_scale_index(Mode::Sage, 128, 95), 2);  // 32-key blocks at d128
  EXPECT_EQ(k_scale_index(Mode::Sage, 64, 95), 1);   // 64-key blocks at d64
  EXPECT_EQ(k_scale_count(Mode::Sage, 128, 129), 5);
  // The host quantizer: 130 keys → 8 groups; the second tile's keys 128, 129 are group 4 (key
  // class 0); groups 5..7 have no key and scale 0.
  std::vector<float> k(130 * 8);
  for (std::size_t i = 0; i < k.size(); ++i) k[i] = static_cast<float>(i % 17) - 8.0f;
  const reference::QuantizedRows q = reference::quantize_k(Mode::Sage2, k.data(), 130, 8, nullptr);
  ASSERT_EQ(q.scales.size(), 8u);
  for (int g = 5; g < 8; ++g) EXPECT_EQ(q.scales[static_cast<std::size_t>(g)], 0.0f);
  EXPECT_GT(q.scales[4], 0.0f);
  for (int key = 0; key < 130; ++key)
    for (int c = 0; c < 8; ++c) {
      const float x = k[static_cast<std::size_t>(key) * 8 + c];
      const float scale = q.scales[static_cast<std::size_t>(k_scale_index(Mode::Sage2, 8, key))];
      EXPECT_LE(std::abs(q.values[static_cast<std::size_t>(key) * 8 + c] * scale - x), 0.5f * scale + 1e-6f);
    }
}

TEST(SageQuant, WorkspaceLayoutIsAlignedAndDisjoint) {
  const WorkspaceLayout l = workspace_layout(Mode::Sage2, 2, 8, 2, 1000, 777, 128);
  EXPECT_EQ(l.q_blocks, 1000);                   // sage2: one Q scale per row
  EXPECT_EQ(l.k_blocks, (777 + 127) / 128 * 4);  // sage2: 4 key groups per 128-key tile
  EXPECT_EQ(l.splits, 4);
  EXPECT_EQ(l.v_keys, 832);
  const std::size_t offsets[] = {l.q8, l.k8, l.q_scale, l.k_scale, l.k_sum, l.v_amax, l.vt8, l.v_scale, l.bytes};
  for (std::size_t i = 0; i + 1 < std::size(offsets); ++i) {
    EXPECT_EQ(offsets[i] % 256, 0u);
    EXPECT_LT(offsets[i], offsets[i + 1]);
  }
  EXPECT_GE(l.k8 - l.q8, 2u * 8 * 1000 * 128);
  EXPECT_GE(l.bytes - l.v_scale, 2u * 2 * 128 * 4);
  const WorkspaceLayout s = workspace_layout(Mode::Sage, 1, 4, 4, 4096, 4096, 64);
  EXPECT_EQ(s.q_blocks, 32);
  EXPECT_EQ(s.k_blocks, 64);
  EXPECT_EQ(s.vt8, 0u);
}

// Smooth-K: subtracting the channel mean of K changes every score of a query by the same
// amount, so softmax is unchanged; on keys with outlier channels it cuts the INT8 error of K.
TEST(SageQuant, SmoothKIsExactForSoftmaxAndShrinksTheQuantizationError) {
  AttentionProblem p;
  p.batch = 1;
  p.heads_q = p.heads_kv = 1;
  p.seq_q = p.seq_kv = 256;
  p.head_dim = 128;
  std::vector<float> q(256 * 128), k(256 * 128), v(256 * 128);
  bench::find_generator("k-outliers").fill(p, 7, q, k, v);
  const std::vector<float> mean = reference::channel_mean(k.data(), 256, 128);
  for (int i = 0; i < 4; ++i) {
    std::vector<double> plain(256), smooth(256);
    for (int j = 0; j < 256; ++j) {
      double a = 0, b = 0;
      for (int c = 0; c < 128; ++c) {
        a += static_cast<double>(q[i * 128 + c]) * k[j * 128 + c];
        b += static_cast<double>(q[i * 128 + c]) * (k[j * 128 + c] - mean[c]);
      }
      plain[j] = a;
      smooth[j] = b;
    }
    // Softmax of both rows: equal to rounding.
    const double max_a = *std::max_element(plain.begin(), plain.end());
    const double max_b = *std::max_element(smooth.begin(), smooth.end());
    double sum_a = 0, sum_b = 0;
    for (int j = 0; j < 256; ++j) {
      sum_a += std::exp((plain[j] - max_a) / std::sqrt(128.0));
      sum_b += std::exp((smooth[j] - max_b) / std::sqrt(128.0));
    }
    for (int j = 0; j < 256; ++j) {
      const double a = std::exp((plain[j] - max_a) / std::sqrt(128.0)) / sum_a;
      const double b = std::exp((smooth[j] - max_b) / std::sqrt(128.0)) / sum_b;
      EXPECT_LE(std::abs(a - b), 1e-9 + 1e-6 * a);  // fp64 rounding of scores in the hundreds
    }
  }
  auto error = [&](const float* m) {
    const reference::QuantizedRows q8 = reference::quantize_rows(k.data(), 256, 128, 32, 1.0f, m);
    double sum = 0;
    for (int j = 0; j < 256; ++j)
      for (int c = 0; c < 128; ++c) {
        const double x = k[j * 128 + c] - (m != nullptr ? m[c] : 0.0f);
        sum += std::abs(q8.values[j * 128 + c] * static_cast<double>(q8.scales[j / 32]) - x);
      }
    return sum;
  };
  const double plain_error = error(nullptr), smooth_error = error(mean.data());
  std::printf("  K INT8 mean abs error on k-outliers: %.4f plain, %.4f smoothed\n", plain_error / (256 * 128),
              smooth_error / (256 * 128));
  EXPECT_LT(smooth_error * 4, plain_error) << "smoothing should cut the error of K with outlier channels";
}

// The whole quantized attention, emulated, against fp64 attention on the inputs: the bounds
// the GPU kernels are held to (sage_bounds.hpp, test_sage.cpp) must hold for the algorithm.
struct Accuracy {
  double cos = 0, rel_l1 = 0;
};
Accuracy emulated_accuracy(Mode mode, const std::string& generator, int n, int d, bool causal) {
  AttentionProblem p;
  p.batch = 1;
  p.heads_q = p.heads_kv = 1;
  p.seq_q = p.seq_kv = n;
  p.head_dim = d;
  p.causal = causal;
  const auto count = static_cast<std::size_t>(n) * d;
  std::vector<float> q(count), k(count), v(count);
  bench::find_generator(generator).fill(p, 11, q, k, v);
  for (auto* t : {&q, &k, &v})
    for (float& x : *t) x = bf16_bits_to_float(float_to_bf16_bits(x));  // the bf16 inputs
  const std::vector<double> got = reference::emulate_attention(mode, q.data(), k.data(), v.data(), n, n, d, causal);
  double dot = 0, norm_got = 0, norm_ref = 0, l1 = 0, l1_ref = 0;
  std::vector<double> s(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) {
    const int end = causal ? i + 1 : n;
    double max = -1e300;
    for (int j = 0; j < end; ++j) {
      double a = 0;
      for (int c = 0; c < d; ++c) a += static_cast<double>(q[i * d + c]) * k[j * d + c];
      s[j] = a / std::sqrt(static_cast<double>(d));
      max = std::max(max, s[j]);
    }
    double sum = 0;
    for (int j = 0; j < end; ++j) sum += s[j] = std::exp(s[j] - max);
    for (int c = 0; c < d; ++c) {
      double ref = 0;
      for (int j = 0; j < end; ++j) ref += s[j] * v[j * d + c];
      ref /= sum;
      const double g = got[static_cast<std::size_t>(i) * d + c];
      dot += g * ref;
      norm_got += g * g;
      norm_ref += ref * ref;
      l1 += std::abs(g - ref);
      l1_ref += std::abs(ref);
    }
  }
  return {dot / std::sqrt(norm_got * norm_ref), l1 / l1_ref};
}

TEST(SageQuant, EmulatedAttentionMeetsTheAccuracyBoundsOnEveryGenerator) {
  for (const char* generator : {"randn", "uniform", "k-outliers", "heavy-q", "peaked"})
    for (const int d : {64, 128})
      for (const Mode mode : {Mode::Sage, Mode::Sage2}) {
        const Accuracy a = emulated_accuracy(mode, generator, 512, d, /*causal=*/d == 64);
        std::printf("  %-5s %-10s d%-3d  cos %.6f  rel L1 %.4f\n", mode == Mode::Sage ? "sage" : "sage2", generator, d,
                    a.cos, a.rel_l1);
        const testing_support::SageBound bound = testing_support::sage_bound(mode, generator);
        EXPECT_GE(a.cos, bound.min_cos) << generator << " d" << d;
        EXPECT_LE(a.rel_l1, bound.max_rel_l1) << generator << " d" << d;
      }
}

}  // namespace
}  // namespace attnsuite
