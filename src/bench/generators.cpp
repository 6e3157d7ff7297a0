#include "bench/generators.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>

#include "attnsuite/error.hpp"
#include "cpu/common.hpp"

namespace attnsuite::bench {

namespace {

// Runs body(begin, end) over [0, count) in chunks of 64 Ki elements on the CPU backends' threads.
void parallel_chunks(std::size_t count, const std::function<void(std::size_t, std::size_t)>& body) {
  constexpr std::size_t kChunk = std::size_t{1} << 16;
  const auto chunks = static_cast<std::int64_t>((count + kChunk - 1) / kChunk);
  cpu::parallel_for(chunks, cpu::cpu_threads(), [&](std::int64_t chunk, int) {
    const std::size_t begin = static_cast<std::size_t>(chunk) * kChunk;
    body(begin, std::min(count, begin + kChunk));
  });
}

// Fills tensor t (0 = Q, 1 = K, 2 = V) with the generator's element function.
void fill_tensor(genmath::Kind kind, std::uint64_t seed, std::uint64_t t, std::span<float> out) {
  const std::uint64_t key = genmath::tensor_key(kind, seed, t);
  parallel_chunks(out.size(), [&](std::size_t begin, std::size_t end) {
    for (std::size_t i = begin; i < end; ++i) out[i] = genmath::value(kind, key, i);
  });
}

void fill_randn(const AttentionProblem&, std::uint64_t seed, std::span<float> q, std::span<float> k,
                std::span<float> v) {
  fill_tensor(genmath::Kind::Randn, seed, 0, q);
  fill_tensor(genmath::Kind::Randn, seed, 1, k);
  fill_tensor(genmath::Kind::Randn, seed, 2, v);
}

void fill_uniform(const AttentionProblem&, std::uint64_t seed, std::span<float> q, std::span<float> k,
                  std::span<float> v) {
  fill_tensor(genmath::Kind::Uniform, seed, 0, q);
  fill_tensor(genmath::Kind::Uniform, seed, 1, k);
  fill_tensor(genmath::Kind::Uniform, seed, 2, v);
}


// --- Generators that reveal the accuracy problems of quantized kernels (sage, sage2) -----------
// Host only (no device_kind): the runner uploads them. docs/generators.md describes each.
namespace sage_inputs {

// The channels of K that carry the outlier bias: 4 per head, spread over the head dim.
bool is_outlier_channel(int channel, int head_dim) {
  return channel == 1 || channel == head_dim / 4 + 3 || channel == head_dim / 2 + 5 || channel == head_dim - 2;
}
constexpr float kOutlierBias = 24.0f;  // in units of the N(0, 1) spread of the other channels

void fill_k_outliers(const AttentionProblem& p, std::uint64_t seed, std::span<float> q, std::span<float> k,
                     std::span<float> v) {
  fill_tensor(genmath::Kind::Randn, seed, 0, q);
  fill_tensor(genmath::Kind::Randn, seed, 1, k);
  fill_tensor(genmath::Kind::Randn, seed, 2, v);
  const auto d = static_cast<std::size_t>(p.head_dim);
  parallel_chunks(k.size(), [&](std::size_t begin, std::size_t end) {
    for (std::size_t i = begin; i < end; ++i)
      if (is_outlier_channel(static_cast<int>(i % d), p.head_dim)) k[i] += kOutlierBias;
  });
}

// Student-t with 3 degrees of freedom, scaled to unit variance (t / √3): z / √(χ²₃ / 3) / √3
// with z and the three squares from independent standard-normal streams 3..6 of the seed.
void fill_heavy_q(const AttentionProblem&, std::uint64_t seed, std::span<float> q, std::span<float> k,
                  std::span<float> v) {
  fill_tensor(genmath::Kind::Randn, seed, 1, k);
  fill_tensor(genmath::Kind::Randn, seed, 2, v);
  std::uint64_t keys[4];
  for (std::uint64_t t = 0; t < 4; ++t) keys[t] = genmath::tensor_key(genmath::Kind::Randn, seed, 3 + t);
  parallel_chunks(q.size(), [&](std::size_t begin, std::size_t end) {
    for (std::size_t i = begin; i < end; ++i) {
      const double z = genmath::value(genmath::Kind::Randn, keys[0], i);
      double chi2 = 0.0;
      for (int j = 1; j < 4; ++j) {
        const double x = genmath::value(genmath::Kind::Randn, keys[j], i);
        chi2 += x * x;
      }
      q[i] = static_cast<float>(z / std::sqrt(chi2 / 3.0) / std::sqrt(3.0));
    }
  });
}

// Peaked attention: K, V ~ N(0, 1); query i of head h is 1.5 · K[j(i)] + N(0, 1) for one key
// j(i) at most 31 keys before its diagonal (so it is visible under the causal mask), j(i) from a
// hash of (seed, batch, head, i). Its score is ≈ 1.5·√d against N(0, 3.25) for the others: at
// d 128 and 16k keys the matched key takes ≈ 99% of the row's weight, at d 64 about 2/3.
void fill_peaked(const AttentionProblem& p, std::uint64_t seed, std::span<float> q, std::span<float> k,
                 std::span<float> v) {
  fill_tensor(genmath::Kind::Randn, seed, 0, q);
  fill_tensor(genmath::Kind::Randn, seed, 1, k);
  fill_tensor(genmath::Kind::Randn, seed, 2, v);
  const std::int64_t d = p.head_dim, hq = p.heads_q, hkv = p.heads_kv, nq = p.seq_q, nk = p.seq_kv;
  const std::uint64_t key = genmath::mix(seed ^ 0x5a6e5a6e5a6e5a6eull);
  const auto rows = static_cast<std::size_t>(p.batch * nq * hq);
  parallel_chunks(rows, [&](std::size_t begin, std::size_t end) {
    for (std::size_t r = begin; r < end; ++r) {
      const std::int64_t h = static_cast<std::int64_t>(r) % hq;
      const std::int64_t i = static_cast<std::int64_t>(r) / hq % nq;
      const std::int64_t b = static_cast<std::int64_t>(r) / hq / nq;
      const std::int64_t diag = i + nk - nq;
      const auto back = static_cast<std::int64_t>(genmath::mix(key + r) % 32);
      const std::int64_t j = std::clamp<std::int64_t>(diag - back, 0, nk - 1);
      const float* k_row = k.data() + ((b * nk + j) * hkv + h / (hq / hkv)) * d;
      float* q_row = q.data() + r * static_cast<std::size_t>(d);
      for (std::int64_t c = 0; c < d; ++c) q_row[c] += 1.5f * k_row[c];
    }
  });
}

}  // namespace sage_inputs
}  // namespace

void fill_standard_normal(std::uint64_t seed, std::uint64_t stream, std::span<float> out) {
  fill_tensor(genmath::Kind::Randn, seed, stream, out);
}

const std::vector<GeneratorInfo>& generators() {
  static const std::vector<GeneratorInfo> list = {
      {"randn", "Q, K, V i.i.d. standard normal (the field's default benchmark input)", fill_randn,
       genmath::Kind::Randn},
      {"uniform", "Q, K, V i.i.d. uniform on [-1, 1)", fill_uniform, genmath::Kind::Uniform},
      // sage / sage2 accuracy inputs (host only).
      {"k-outliers", "randn, K with a bias of +24 on 4 channels per head (LLM-like key outliers)",
       sage_inputs::fill_k_outliers, std::nullopt},
      {"heavy-q", "randn K, V; Q Student-t (3 degrees of freedom, unit variance): heavy-tailed queries",
       sage_inputs::fill_heavy_q, std::nullopt},
      {"peaked", "randn K, V; each query 1.5 x one key within 31 of its diagonal plus noise: peaked attention",
       sage_inputs::fill_peaked, std::nullopt},
  };
  return list;
}

const GeneratorInfo& find_generator(std::string_view name) {
  for (const auto& g : generators())
    if (g.name == name) return g;
  std::string names;
  for (const auto& g : generators()) names += (names.empty() ? "" : ", ") + g.name;
  throw Error(ErrorKind::Usage, fmt::format("unknown input generator '{}'; available: {}", name, names));
}

}  // namespace attnsuite::bench
