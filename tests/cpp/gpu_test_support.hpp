// Test support shared by the GPU test files (test_cuda_*.cpp, test_peers.cpp, test_sage.cpp, others):
// the no-CUDA-device skip, 16-bit host tensors with random inputs, an fp64 reference, the naive
// same-dtype implementation that sets the error bounds, and the error statistics.
//
// Everything here is CPU code except cuda_device_missing() and SKIP_WITHOUT_CUDA_DEVICE(),
// which need the CUDA runtime and exist only where ATTNSUITE_HAVE_CUDA is set.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#if ATTNSUITE_HAVE_CUDA
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>
#endif

#include "attnsuite/attnsuite.hpp"

namespace attnsuite::testing_support {

#if ATTNSUITE_HAVE_CUDA
// Why there is no usable CUDA device, or "" where there is one.
inline std::string cuda_device_missing() {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    cudaGetLastError();
    return std::string("cudaGetDeviceCount failed: ") + cudaGetErrorString(status);
  }
  return count == 0 ? "cudaGetDeviceCount returned 0" : "";
}

#define SKIP_WITHOUT_CUDA_DEVICE()                                                   \
  do {                                                                               \
    const std::string missing = ::attnsuite::testing_support::cuda_device_missing(); \
    if (!missing.empty()) GTEST_SKIP() << "no CUDA device: " << missing;             \
  } while (0)

// The one-line usage error with which backend.check_options refuses `options` (a failure when it
// accepts them or throws another kind); "" when accepted.
inline std::string options_usage_error(const Backend& backend, const std::map<std::string, std::string>& options) {
  try {
    backend.check_options(options);
    ADD_FAILURE() << backend.name() << " accepted the options";
    return std::string();
  } catch (const Error& error) {
    EXPECT_EQ(error.kind(), ErrorKind::Usage) << error.what();
    return std::string(error.what());
  }
}
#endif  // ATTNSUITE_HAVE_CUDA

// Runs body(i) for i in [0, count) on the machine's cores (the references are O(N²·D)).
template <class Body>
void parallel_rows(std::int64_t count, const Body& body) {
  const int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      for (std::int64_t i = t; i < count; i += threads) body(i);
    });
  }
  for (auto& thread : pool) thread.join();
}

inline float round_to(DType dtype, float value) {
  if (dtype == DType::F16) return fp16_bits_to_float(float_to_fp16_bits(value));
  if (dtype == DType::BF16) return bf16_bits_to_float(float_to_bf16_bits(value));
  return value;
}

// A 16-bit tensor on the host, in the problem's layout, as TensorView-compatible strides.
struct HostTensor {
  std::vector<std::uint16_t> bits;
  std::array<std::int64_t, 4> shape{};
  std::array<std::int64_t, 4> strides{};

  HostTensor(std::array<std::int64_t, 4> shape_, Layout layout)
      : bits(static_cast<std::size_t>(shape_[0] * shape_[1] * shape_[2] * shape_[3])),
        shape(shape_),
        strides(TensorView::dense_strides(shape_, layout)) {}
  std::int64_t offset(std::int64_t b, std::int64_t s, std::int64_t h, std::int64_t d) const {
    return b * strides[0] + s * strides[1] + h * strides[2] + d * strides[3];
  }
  float at(DType dtype, std::int64_t b, std::int64_t s, std::int64_t h, std::int64_t d) const {
    return load_as_float(bits.data(), dtype, offset(b, s, h, d));
  }
  std::size_t bytes() const { return bits.size() * 2; }
};

struct Inputs {
  HostTensor q, k, v;
};

// Q, K, V with N(0, 1) values rounded to the problem's (16-bit) dtype.
inline Inputs random_inputs(const AttentionProblem& p, std::uint64_t seed) {
  Inputs in{HostTensor({p.batch, p.seq_q, p.heads_q, p.head_dim}, p.layout),
            HostTensor({p.batch, p.seq_kv, p.heads_kv, p.head_dim}, p.layout),
            HostTensor({p.batch, p.seq_kv, p.heads_kv, p.dim_v()}, p.layout)};
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (HostTensor* t : {&in.q, &in.k, &in.v})
    for (auto& value : t->bits)
      value = p.dtype == DType::F16 ? float_to_fp16_bits(normal(rng)) : float_to_bf16_bits(normal(rng));
  return in;
}

// Output in (batch, heads_q, seq_q, dim_v) order plus LSE in (batch, heads_q, seq_q).
struct Result {
  std::vector<double> out;
  std::vector<double> lse;
};

inline std::int64_t out_index(const AttentionProblem& p, std::int64_t b, std::int64_t h, std::int64_t i) {
  return ((b * p.heads_q + h) * p.seq_q + i) * p.dim_v();
}

// A zero-filled Result of the problem's sizes.
inline Result empty_result(const AttentionProblem& p) {
  return {std::vector<double>(static_cast<std::size_t>(p.batch) * p.heads_q * p.seq_q * p.dim_v()),
          std::vector<double>(static_cast<std::size_t>(p.batch) * p.heads_q * p.seq_q)};
}

// Plain loops in double over element accessors q(b, s, h, d), k(…), v(…); rows that see no key
// give O = 0 and LSE = -inf. round_p_out: P rounded to e4m3 before P·V (the row sum is not) and O
// to bf16, the FP8 kernels' naive same-dtype model.
template <class Q, class K, class V>
Result reference_of(const AttentionProblem& p, const Q& q, const K& k, const V& v, bool round_p_out = false) {
  Result r = empty_result(p);
  const double scale = p.softmax_scale();
  parallel_rows(static_cast<std::int64_t>(p.batch) * p.heads_q * p.seq_q, [&](std::int64_t row) {
    const std::int64_t i = row % p.seq_q, h = row / p.seq_q % p.heads_q, b = row / p.seq_q / p.heads_q;
    const std::int64_t kvh = p.kv_head_of(static_cast<int>(h));
    const std::int64_t begin = p.key_begin(i), end = p.key_end(i);
    double* out = &r.out[out_index(p, b, h, i)];
    std::fill(out, out + p.dim_v(), 0.0);
    if (begin >= end) {
      r.lse[row] = -std::numeric_limits<double>::infinity();
      return;
    }
    std::vector<double> s(end - begin);
    double max = -std::numeric_limits<double>::infinity();
    for (std::int64_t j = begin; j < end; ++j) {
      double dot = 0.0;
      for (int d = 0; d < p.head_dim; ++d) dot += q(b, i, h, d) * k(b, j, kvh, d);
      s[j - begin] = dot * scale;
      max = std::max(max, s[j - begin]);
    }
    double sum = 0.0;
    for (auto& value : s) sum += (value = std::exp(value - max));
    for (std::int64_t j = begin; j < end; ++j) {
      const double weight =
          round_p_out ? e4m3_bits_to_float(float_to_e4m3_bits(static_cast<float>(s[j - begin]))) : s[j - begin];
      for (int d = 0; d < p.dim_v(); ++d) out[d] += weight * v(b, j, kvh, d);
    }
    for (int d = 0; d < p.dim_v(); ++d) {
      out[d] /= sum;
      if (round_p_out) out[d] = round_to(DType::BF16, static_cast<float>(out[d]));
    }
    r.lse[row] = max + std::log(sum);
  });
  return r;
}

// reference_of over the same (16-bit) input values.
inline Result reference_f64(const AttentionProblem& p, const Inputs& in) {
  const auto at = [&](const HostTensor& t) {
    return [&p, &t](std::int64_t b, std::int64_t s, std::int64_t h, std::int64_t d) {
      return static_cast<double>(t.at(p.dtype, b, s, h, d));
    };
  };
  return reference_of(p, at(in.q), at(in.k), at(in.v));
}

// The naive same-dtype implementation that sets the error bound: inputs in the problem's
// dtype, fp32 scores, softmax and accumulation, P rounded to the dtype before P·V, output
// rounded; with round_scores, the scaled scores are rounded to the dtype too (for a backend
// that materializes them in the dtype, as cuda-vanilla does).
inline Result naive_same_dtype(const AttentionProblem& p, const Inputs& in, bool round_scores) {
  Result r = empty_result(p);
  const float scale = p.softmax_scale();
  parallel_rows(static_cast<std::int64_t>(p.batch) * p.heads_q * p.seq_q, [&](std::int64_t row) {
    const std::int64_t i = row % p.seq_q, h = row / p.seq_q % p.heads_q, b = row / p.seq_q / p.heads_q;
    const std::int64_t kvh = p.kv_head_of(static_cast<int>(h));
    const std::int64_t begin = p.key_begin(i), end = p.key_end(i);
    double* out = &r.out[out_index(p, b, h, i)];
    std::fill(out, out + p.dim_v(), 0.0);
    if (begin >= end) {
      r.lse[row] = -std::numeric_limits<double>::infinity();
      return;
    }
    std::vector<float> s(end - begin);
    float max = -std::numeric_limits<float>::infinity();
    for (std::int64_t j = begin; j < end; ++j) {
      float dot = 0.0f;
      for (int d = 0; d < p.head_dim; ++d) dot += in.q.at(p.dtype, b, i, h, d) * in.k.at(p.dtype, b, j, kvh, d);
      s[j - begin] = round_scores ? round_to(p.dtype, dot * scale) : dot * scale;
      max = std::max(max, s[j - begin]);
    }
    float sum = 0.0f;
    for (auto& value : s) sum += (value = std::exp(value - max));
    std::vector<float> acc(p.dim_v(), 0.0f);
    for (std::int64_t j = begin; j < end; ++j) {
      const float prob = round_to(p.dtype, s[j - begin] / sum);
      for (int d = 0; d < p.dim_v(); ++d) acc[d] += prob * in.v.at(p.dtype, b, j, kvh, d);
    }
    for (int d = 0; d < p.dim_v(); ++d) out[d] = round_to(p.dtype, acc[d]);
    r.lse[row] = max + std::log(sum);
  });
  return r;
}

struct ErrorStats {
  double max_abs = 0.0;
  double mean_abs = 0.0;
  std::int64_t nan_count = 0;
  std::int64_t worst_index = -1;
};

// Element-wise |got - want|; NaNs in got are counted, not measured.
inline ErrorStats compare(const std::vector<double>& got, const std::vector<double>& want) {
  ErrorStats stats;
  double total = 0.0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    if (std::isnan(got[i])) {
      ++stats.nan_count;
      continue;
    }
    const double err = std::abs(got[i] - want[i]);
    total += err;
    if (err > stats.max_abs || stats.worst_index < 0) {
      stats.max_abs = std::max(stats.max_abs, err);
      stats.worst_index = static_cast<std::int64_t>(i);
    }
  }
  stats.mean_abs = want.empty() ? 0.0 : total / static_cast<double>(want.size());
  return stats;
}

// The largest finite |value|.
inline double max_abs(const std::vector<double>& values) {
  double m = 0.0;
  for (double value : values)
    if (std::isfinite(value)) m = std::max(m, std::abs(value));
  return m;
}

inline AttentionProblem make_problem(int batch, int heads_q, int heads_kv, int seq_q, int seq_kv, int head_dim,
                                     DType dtype, Layout layout, bool causal) {
  AttentionProblem p;
  p.batch = batch;
  p.heads_q = heads_q;
  p.heads_kv = heads_kv;
  p.seq_q = seq_q;
  p.seq_kv = seq_kv;
  p.head_dim = head_dim;
  p.dtype = dtype;
  p.layout = layout;
  p.causal = causal;
  return p;
}

}  // namespace attnsuite::testing_support
