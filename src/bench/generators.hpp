// Named input generators. Each fills dense fp32 (batch, seq, heads, dim) buffers for Q, K, V
// from a seed; the value of every element depends only on (seed, tensor, index), so inputs are
// the same whatever the thread count, and — for those with a device_kind — on the GPU too.
// Documented in docs/generators.md.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "attnsuite/problem.hpp"
#include "bench/generator_math.hpp"

namespace attnsuite::bench {

struct GeneratorInfo {
  std::string name;
  std::string description;
  void (*fill)(const AttentionProblem& problem, std::uint64_t seed, std::span<float> q,
               std::span<float> k, std::span<float> v);
  // Set when the generator also runs on a GPU (bitwise the same values; generator_math.hpp):
  // the runner then fills device inputs in place instead of uploading the host copy.
  std::optional<genmath::Kind> device_kind;
};

const std::vector<GeneratorInfo>& generators();
// Throws Error(Usage): "unknown input generator 'x'; available: randn, ...".
const GeneratorInfo& find_generator(std::string_view name);

// Fills out[i] = N(0, 1) draws for stream `stream` of `seed`, in parallel.
void fill_standard_normal(std::uint64_t seed, std::uint64_t stream, std::span<float> out);

}  // namespace attnsuite::bench
