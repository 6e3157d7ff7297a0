// Named input generators. Each fills dense fp32 (batch, seq, heads, dim) buffers for Q, K, V
// from a seed; the value of every element depends only on (seed, tensor, index), so inputs are
// the same whatever the thread count. Documented in docs/generators.md.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "attnsuite/problem.hpp"

namespace attnsuite::bench {

struct GeneratorInfo {
  std::string name;
  std::string description;
  void (*fill)(const AttentionProblem& problem, std::uint64_t seed, std::span<float> q,
               std::span<float> k, std::span<float> v);
};

const std::vector<GeneratorInfo>& generators();
// Throws Error(Usage): "unknown input generator 'x'; available: randn, ...".
const GeneratorInfo& find_generator(std::string_view name);

// Fills out[i] = N(0, 1) draws for stream `stream` of `seed`, in parallel.
void fill_standard_normal(std::uint64_t seed, std::uint64_t stream, std::span<float> out);

}  // namespace attnsuite::bench
