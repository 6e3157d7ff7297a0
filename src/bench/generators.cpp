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

}  // namespace

void fill_standard_normal(std::uint64_t seed, std::uint64_t stream, std::span<float> out) {
  fill_tensor(genmath::Kind::Randn, seed, stream, out);
}

const std::vector<GeneratorInfo>& generators() {
  static const std::vector<GeneratorInfo> list = {
      {"randn", "Q, K, V i.i.d. standard normal (the field's default benchmark input)", fill_randn,
       genmath::Kind::Randn},
      {"uniform", "Q, K, V i.i.d. uniform on [-1, 1)", fill_uniform, genmath::Kind::Uniform},
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
