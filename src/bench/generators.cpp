#include "bench/generators.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numbers>
#include <functional>

#include "attnsuite/error.hpp"
#include "cpu/common.hpp"

namespace attnsuite::bench {

namespace {

// splitmix64: a counter-based generator, so element i needs no state from element i-1.
std::uint64_t mix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

double to_unit_open(std::uint64_t bits) {  // (0, 1], never 0 so log() is finite
  return (static_cast<double>(bits >> 11) + 1.0) * (1.0 / 9007199254740992.0);
}

// Runs body(begin, end) over [0, count) in chunks of 64 Ki elements on the CPU backends' threads.
void parallel_chunks(std::size_t count, const std::function<void(std::size_t, std::size_t)>& body) {
  constexpr std::size_t kChunk = std::size_t{1} << 16;
  const auto chunks = static_cast<std::int64_t>((count + kChunk - 1) / kChunk);
  cpu::parallel_for(chunks, cpu::cpu_threads(), [&](std::int64_t chunk, int) {
    const std::size_t begin = static_cast<std::size_t>(chunk) * kChunk;
    body(begin, std::min(count, begin + kChunk));
  });
}

void fill_randn(const AttentionProblem&, std::uint64_t seed, std::span<float> q, std::span<float> k,
                std::span<float> v) {
  fill_standard_normal(seed, 0, q);
  fill_standard_normal(seed, 1, k);
  fill_standard_normal(seed, 2, v);
}

void fill_uniform(const AttentionProblem&, std::uint64_t seed, std::span<float> q, std::span<float> k,
                  std::span<float> v) {
  std::span<float> tensors[3] = {q, k, v};
  for (std::uint64_t t = 0; t < 3; ++t) {
    auto out = tensors[t];
    const std::uint64_t key = mix(seed ^ (t + 11) * 0x632be59bd9b4e019ull);
    parallel_chunks(out.size(), [&](std::size_t begin, std::size_t end) {
      for (std::size_t i = begin; i < end; ++i)
        out[i] = static_cast<float>(2.0 * to_unit_open(mix(key + i)) - 1.0);
    });
  }
}

}  // namespace

void fill_standard_normal(std::uint64_t seed, std::uint64_t stream, std::span<float> out) {
  const std::uint64_t key = mix(seed ^ (stream + 1) * 0xd1b54a32d192ed03ull);
  parallel_chunks(out.size(), [&](std::size_t begin, std::size_t end) {
    // Box–Muller on pairs (2j, 2j+1); both halves of a pair come from counter j.
    for (std::size_t i = begin; i < end; ++i) {
      const std::uint64_t pair = i / 2;
      const double radius = std::sqrt(-2.0 * std::log(to_unit_open(mix(key + 2 * pair))));
      const double angle = 2.0 * std::numbers::pi * to_unit_open(mix(key + 2 * pair + 1));
      out[i] = static_cast<float>(radius * ((i & 1) ? std::sin(angle) : std::cos(angle)));
    }
  });
}

const std::vector<GeneratorInfo>& generators() {
  static const std::vector<GeneratorInfo> list = {
      {"randn", "Q, K, V i.i.d. standard normal (the field's default benchmark input)", fill_randn},
      {"uniform", "Q, K, V i.i.d. uniform on [-1, 1)", fill_uniform},
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
