// Host reference of sage's quantizers (the rules of quant_rule.hpp applied to one (batch, head)
// slice) and a host emulation of the whole quantized attention of sage / sage2. The CPU tests
// check the rules and the emulation's accuracy on every generator; the GPU tests compare the
// quantization kernels with this, element by element. Header-only, no CUDA.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "attnsuite/dtype.hpp"
#include "cuda/sage/quant_rule.hpp"

namespace attnsuite::cuda::sage::reference {

struct QuantizedRows {
  std::vector<std::int8_t> values;  // rows × head_dim
  std::vector<float> scales;        // one per block of block_rows rows (amax / 127 · multiplier)
};

// Channel means of x (rows × d), summed in fp64 (the GPU sums fp32 partials; the two agree to
// rounding, which the GPU test allows for).
inline std::vector<float> channel_mean(const float* x, int rows, int d) {
  std::vector<float> mean(static_cast<std::size_t>(d), 0.0f);
  for (int c = 0; c < d; ++c) {
    double sum = 0.0;
    for (int r = 0; r < rows; ++r) sum += x[static_cast<std::size_t>(r) * d + c];
    mean[static_cast<std::size_t>(c)] = rows > 0 ? static_cast<float>(sum / rows) : 0.0f;
  }
  return mean;
}

// INT8 with one scale per block: row r belongs to block block_of(r) of `blocks`; `mean` (d
// values) is subtracted first when given (smooth-K).
template <class BlockOf>
QuantizedRows quantize_blocks(const float* x, int rows, int d, int blocks, BlockOf block_of, float multiplier,
                              const float* mean) {
  QuantizedRows out;
  out.values.resize(static_cast<std::size_t>(rows) * d);
  out.scales.assign(static_cast<std::size_t>(blocks), 0.0f);
  const auto value = [&](int r, int c) {
    return x[static_cast<std::size_t>(r) * d + c] - (mean != nullptr ? mean[c] : 0.0f);
  };
  std::vector<std::uint32_t> bits(static_cast<std::size_t>(blocks), 0);
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < d; ++c) {
      auto& b = bits[static_cast<std::size_t>(block_of(r))];
      b = std::max(b, abs_bits(value(r, c)));
    }
  std::vector<float> inverse(static_cast<std::size_t>(blocks));
  for (int b = 0; b < blocks; ++b) {
    const float amax = bits_float(bits[static_cast<std::size_t>(b)]);
    inverse[static_cast<std::size_t>(b)] = int8_inverse_scale(amax);
    out.scales[static_cast<std::size_t>(b)] = amax / kInt8Max * multiplier;
  }
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < d; ++c)
      out.values[static_cast<std::size_t>(r) * d + c] =
          quantize_int8(value(r, c), inverse[static_cast<std::size_t>(block_of(r))]);
  return out;
}

// INT8 per block of block_rows consecutive rows (Q; sage's K with `mean`).
inline QuantizedRows quantize_rows(const float* x, int rows, int d, int block_rows, float multiplier,
                                   const float* mean = nullptr) {
  return quantize_blocks(
      x, rows, d, (rows + block_rows - 1) / block_rows, [&](int r) { return r / block_rows; }, multiplier, mean);
}

// K as `mode` quantizes it: smoothed by `mean`, one scale per k_scale_index.
inline QuantizedRows quantize_k(Mode mode, const float* k, int keys, int d, const float* mean,
                                float multiplier = 1.0f) {
  return quantize_blocks(
      k, keys, d, k_scale_count(mode, d, keys), [&](int key) { return k_scale_index(mode, d, key); }, multiplier, mean);
}

struct QuantizedVt {
  std::vector<std::uint8_t> values;  // d × v_padded_keys(keys), keys permuted (v_key_position)
  std::vector<float> scales;         // d: amax / 448
  std::int64_t padded_keys = 0;
};

// V (keys × d) → FP8 e4m3 per channel, transposed, as the GPU writes it.
inline QuantizedVt quantize_v(const float* v, int keys, int d) {
  QuantizedVt out;
  out.padded_keys = v_padded_keys(keys);
  out.values.assign(static_cast<std::size_t>(d * out.padded_keys), 0);
  out.scales.resize(static_cast<std::size_t>(d));
  for (int c = 0; c < d; ++c) {
    std::uint32_t bits = 0;
    for (int j = 0; j < keys; ++j) bits = std::max(bits, abs_bits(v[static_cast<std::size_t>(j) * d + c]));
    const float amax = bits_float(bits);
    const float inverse = fp8_inverse_scale(amax);
    out.scales[static_cast<std::size_t>(c)] = amax / kFp8Max;
    for (int j = 0; j < keys; ++j) {
      const int position = j / kVKeyPad * kVKeyPad + v_key_position(j % kVKeyPad);
      out.values[static_cast<std::size_t>(c * out.padded_keys + position)] =
          float_to_e4m3_bits(v[static_cast<std::size_t>(j) * d + c] * inverse);
    }
  }
  return out;
}

// The quantized attention of one (batch, head) slice as sage / sage2 compute it, in fp64 apart
// from the quantization steps: q (nq × d) and k, v (nk × d) are the 16-bit inputs as floats;
// the mask is bottom-right causal when `causal`. Returns O (nq × d).
// p_bits: the significant bits P is rounded to for sage's 16-bit P·V (11 for fp16, 8 for bf16).
inline std::vector<double> emulate_attention(Mode mode, const float* q, const float* k, const float* v, int nq, int nk,
                                             int d, bool causal, int p_bits = 8) {
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  const std::vector<float> mean = channel_mean(k, nk, d);
  const QuantizedRows q8 = quantize_rows(q, nq, d, q_block_rows(mode), 1.0f);
  const QuantizedRows k8 = quantize_k(mode, k, nk, d, mean.data());
  QuantizedVt vt;
  if (mode == Mode::Sage2) vt = quantize_v(v, nk, d);
  std::vector<double> out(static_cast<std::size_t>(nq) * d, 0.0);
  std::vector<double> s(static_cast<std::size_t>(nk));
  for (int i = 0; i < nq; ++i) {
    const int end = causal ? std::clamp(i + nk - nq + 1, 0, nk) : nk;
    if (end == 0) continue;
    const double qs = q8.scales[static_cast<std::size_t>(i / q_block_rows(mode))];
    double max = -std::numeric_limits<double>::infinity();
    for (int j = 0; j < end; ++j) {
      std::int64_t dot = 0;
      for (int c = 0; c < d; ++c)
        dot += static_cast<std::int64_t>(q8.values[static_cast<std::size_t>(i) * d + c]) *
               k8.values[static_cast<std::size_t>(j) * d + c];
      s[static_cast<std::size_t>(j)] =
          static_cast<double>(dot) * qs * k8.scales[static_cast<std::size_t>(k_scale_index(mode, d, j))] * scale;
      max = std::max(max, s[static_cast<std::size_t>(j)]);
    }
    double sum = 0.0;
    for (int j = 0; j < end; ++j) {
      const double p = std::exp(s[static_cast<std::size_t>(j)] - max);
      sum += p;
      double* o = out.data() + static_cast<std::size_t>(i) * d;
      if (mode == Mode::Sage) {
        // P rounded to V's 16-bit type as the kernel rounds it.
        int e = 0;
        std::frexp(p, &e);
        const double p16 = std::ldexp(std::nearbyint(std::ldexp(p, p_bits - e)), e - p_bits);
        for (int c = 0; c < d; ++c) o[c] += p16 * v[static_cast<std::size_t>(j) * d + c];
      } else {
        const double p8 = e4m3_bits_to_float(float_to_e4m3_bits(static_cast<float>(p * kFp8Max)));
        const int position = j / kVKeyPad * kVKeyPad + v_key_position(j % kVKeyPad);
        for (int c = 0; c < d; ++c)
          o[c] += p8 / kFp8Max *
                  e4m3_bits_to_float(vt.values[static_cast<std::size_t>(c * vt.padded_keys + position)]) *
                  vt.scales[static_cast<std::size_t>(c)];
      }
    }
    for (int c = 0; c < d; ++c) out[static_cast<std::size_t>(i) * d + c] /= sum;
  }
  return out;
}

}  // namespace attnsuite::cuda::sage::reference
