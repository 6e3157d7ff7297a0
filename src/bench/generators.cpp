#include "bench/generators.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>

#include "attnsuite/error.hpp"
#include "bench/captured_inputs.hpp"
#include "core/parallel.hpp"

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

// --- Structured generators and captured activations (issue 6, sparse attention) ---------------
// Random Gaussian Q/K give nearly uniform attention: nothing for a sparse kernel to skip. These
// give the structure that real layers have (docs/generators.md): locality, clusters, sinks. All
// are host-only (no device_kind): the runner uploads the host copy.
namespace {

constexpr double kTwoPi = 6.283185307179586;

// A deterministic uniform draw in (0, 1] for a (seed, salt, index) triple.
double structured_uniform(std::uint64_t seed, std::uint64_t salt, std::uint64_t index) {
  return genmath::unit_open(genmath::mix(seed ^ genmath::mix(salt * 0x9e3779b97f4a7c15ull + index)));
}

// Amplitude c of the structured part so that two equal unit directions give a scaled logit of
// `logit` (c² · 1 / sqrt(d) = logit).
double amplitude(int head_dim, double logit) { return std::sqrt(logit * std::sqrt(static_cast<double>(head_dim))); }

// Noise N(0, 0.5²) on every element, then structure added by `add(tensor, b, s, h, row)`.
template <class Add>
void fill_structured(const AttentionProblem& p, std::uint64_t seed, std::span<float> q, std::span<float> k,
                     std::span<float> v, Add add) {
  fill_tensor(genmath::Kind::Randn, seed ^ 0x5eed5eedull, 0, q);
  fill_tensor(genmath::Kind::Randn, seed ^ 0x5eed5eedull, 1, k);
  fill_tensor(genmath::Kind::Randn, seed ^ 0x5eed5eedull, 2, v);
  for (float& x : q) x *= 0.5f;
  for (float& x : k) x *= 0.5f;
  const int d = p.head_dim;
  for (int t = 0; t < 2; ++t) {
    const std::span<float> out = t == 0 ? q : k;
    const int seq = t == 0 ? p.seq_q : p.seq_kv, heads = t == 0 ? p.heads_q : p.heads_kv;
    const std::int64_t rows = static_cast<std::int64_t>(p.batch) * seq * heads;
    cpu::parallel_for((rows + 255) / 256, cpu::cpu_threads(), [&](std::int64_t chunk, int) {
      for (std::int64_t r = chunk * 256; r < std::min(rows, (chunk + 1) * 256); ++r) {
        const int h = static_cast<int>(r % heads);
        const int s = static_cast<int>((r / heads) % seq);
        const int b = static_cast<int>(r / (static_cast<std::int64_t>(heads) * seq));
        // Q heads of one GQA group share their kv head's structure; query positions are aligned
        // bottom-right with the keys, like the causal mask.
        const int kv_head = t == 0 ? p.kv_head_of(h) : h;
        const int position = t == 0 ? s + (p.seq_kv - p.seq_q) : s;
        add(t, b, position, kv_head, std::span<float>(out.data() + r * d, static_cast<std::size_t>(d)));
      }
    });
  }
}

// banded: a rotary-like positional code u_i (d/2 frequencies below 2π/512 per kv head, unit
// norm) in Q and K, so that q_i·k_j ∝ (2/d)·Σ cos(ω_f (i − j)): scaled logit 12 at i = j,
// falling to noise beyond ~512 tokens. Attention is local: a band of a few hundred keys.
void add_band(const AttentionProblem& p, std::uint64_t seed, int head, int position, std::span<float> row,
              double logit) {
  const int half = p.head_dim / 2;
  const double c = amplitude(p.head_dim, logit) / std::sqrt(static_cast<double>(half));
  for (int f = 0; f < half; ++f) {
    const double omega =
        kTwoPi / 512.0 * structured_uniform(seed, 0xba11d, static_cast<std::uint64_t>(head) * 4096 + f);
    const double angle = omega * position;
    row[static_cast<std::size_t>(2 * f)] += static_cast<float>(c * std::cos(angle));
    row[static_cast<std::size_t>(2 * f + 1)] += static_cast<float>(c * std::sin(angle));
  }
}

void fill_banded(const AttentionProblem& p, std::uint64_t seed, std::span<float> q, std::span<float> k,
                 std::span<float> v) {
  fill_structured(p, seed, q, k, v, [&](int, int, int position, int head, std::span<float> row) {
    add_band(p, seed, head, position, row, 12.0);
  });
}

// A unit direction per (seed, salt, head, index): normalized Gaussian draws.
void unit_direction(std::uint64_t seed, std::uint64_t salt, std::uint64_t index, std::span<double> out) {
  double norm = 0;
  for (std::size_t i = 0; i < out.size(); ++i) {
    const double u1 = structured_uniform(seed, salt, index * 2048 + 2 * i);
    const double u2 = structured_uniform(seed, salt, index * 2048 + 2 * i + 1);
    out[i] = std::sqrt(-2.0 * std::log(u1)) * std::cos(kTwoPi * u2);
    norm += out[i] * out[i];
  }
  for (double& x : out) x /= std::sqrt(norm);
}

// clustered: the sequence is cut into segments of 256 tokens, each assigned one of 8 clusters
// per kv head (a hash of the segment); a token carries its cluster's unit centroid (scaled
// logit 12 between tokens of one cluster, ~±1 across clusters). A query attends to its cluster's
// segments wherever they are: non-local sparsity of about 1 − 1/8.
void fill_clustered(const AttentionProblem& p, std::uint64_t seed, std::span<float> q, std::span<float> k,
                    std::span<float> v) {
  constexpr int kClusters = 8, kSegment = 256;
  const int d = p.head_dim;
  std::vector<double> centroids(static_cast<std::size_t>(p.heads_kv) * kClusters * d);
  for (int h = 0; h < p.heads_kv; ++h)
    for (int c = 0; c < kClusters; ++c)
      unit_direction(seed, 0xc1a55, static_cast<std::uint64_t>(h) * kClusters + c,
                     std::span<double>(centroids.data() + (static_cast<std::size_t>(h) * kClusters + c) * d,
                                       static_cast<std::size_t>(d)));
  const double amp = amplitude(d, 12.0);
  fill_structured(p, seed, q, k, v, [&](int, int b, int position, int head, std::span<float> row) {
    const std::uint64_t segment = static_cast<std::uint64_t>(position / kSegment);
    const int cluster = static_cast<int>(
        genmath::mix(seed ^ genmath::mix((static_cast<std::uint64_t>(b) * 65536 + head) * 1048576 + segment)) %
        kClusters);
    const double* mu = centroids.data() + (static_cast<std::size_t>(head) * kClusters + cluster) * d;
    for (int i = 0; i < d; ++i) row[static_cast<std::size_t>(i)] += static_cast<float>(amp * mu[i]);
  });
}

// sinks: banded, plus attention sinks: the first 4 keys carry a direction s (per kv head) that
// every query carries too (scaled logit 11 against the band's 12), and their values are scaled
// by 0.1, as in trained LLMs whose first tokens absorb attention and contribute little.
void fill_sinks(const AttentionProblem& p, std::uint64_t seed, std::span<float> q, std::span<float> k,
                std::span<float> v) {
  constexpr int kSinkTokens = 4;
  const int d = p.head_dim;
  std::vector<double> sink(static_cast<std::size_t>(p.heads_kv) * d);
  for (int h = 0; h < p.heads_kv; ++h)
    unit_direction(seed, 0x51c4, static_cast<std::uint64_t>(h),
                   std::span<double>(sink.data() + static_cast<std::size_t>(h) * d, static_cast<std::size_t>(d)));
  const double amp = amplitude(d, 11.0);
  fill_structured(p, seed, q, k, v, [&](int tensor, int, int position, int head, std::span<float> row) {
    const bool is_sink = tensor == 1 && position < kSinkTokens;
    if (!is_sink) add_band(p, seed, head, position, row, 12.0);
    if (tensor == 0 || is_sink)
      for (int i = 0; i < d; ++i)
        row[static_cast<std::size_t>(i)] += static_cast<float>(amp * sink[static_cast<std::size_t>(head) * d + i]);
  });
  const std::int64_t dv = p.dim_v();
  for (int b = 0; b < p.batch; ++b)
    for (int s = 0; s < std::min(kSinkTokens, p.seq_kv); ++s)
      for (int h = 0; h < p.heads_kv; ++h)
        for (std::int64_t i = 0; i < dv; ++i)
          v[static_cast<std::size_t>(((static_cast<std::int64_t>(b) * p.seq_kv + s) * p.heads_kv + h) * dv + i)] *=
              0.1f;
}

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
      // Structured inputs for sparse attention (docs/generators.md).
      {"banded", "locality: a rotary-like positional code, attention within ~512 tokens", fill_banded, std::nullopt},
      {"clustered", "8 clusters per head over segments of 256 tokens: non-local sparsity", fill_clustered,
       std::nullopt},
      {"sinks", "banded plus 4 attention-sink keys that take a large share of every query's mass", fill_sinks,
       std::nullopt},
  };
  return list;
}

const GeneratorInfo& find_generator(std::string_view name) {
  for (const auto& g : generators())
    if (g.name == name) return g;
  if (name.starts_with("npy:") || name.starts_with("safetensors:")) return captured_generator(name);
  std::string names;
  for (const auto& g : generators()) names += (names.empty() ? "" : ", ") + g.name;
  throw Error(ErrorKind::Usage, fmt::format("unknown input generator '{}'; available: {}", name, names));
}

}  // namespace attnsuite::bench
