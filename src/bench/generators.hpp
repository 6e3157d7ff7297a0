// Named input generators. Each fills dense fp32 (batch, seq, heads, dim) buffers for Q, K, V
// from a seed; the value of every element depends only on (seed, tensor, index), so inputs are
// the same whatever the thread count, and — for those with a device_kind — on the GPU too.
// Documented in docs/generators.md.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "attnsuite/problem.hpp"
#include "core/generator_math.hpp"

namespace attnsuite::bench {

struct GeneratorInfo {
  std::string name;
  std::string description;
  // A std::function so that a generator can carry state: npy:DIR and safetensors:FILE hold
  // their path (see find_generator).
  std::function<void(const AttentionProblem& problem, std::uint64_t seed, std::span<float> q, std::span<float> k,
                     std::span<float> v)>
      fill;
  // Set when the generator also runs on a GPU (bitwise the same values; generator_math.hpp):
  // the runner then fills device inputs in place instead of uploading the host copy.
  std::optional<genmath::Kind> device_kind;
};

const std::vector<GeneratorInfo>& generators();
// Throws Error(Usage): "unknown input generator 'x'; available: randn, ...". Besides the named
// ones: "npy:DIR" (DIR/q.npy, k.npy, v.npy) and "safetensors:FILE" (tensors q, k, v): captured
// activations of shape (batch, seq, heads, dim) or (seq, heads, dim), f32/f16/bf16/f64; the file
// headers are checked here, the shapes against the problem when the inputs are filled.
const GeneratorInfo& find_generator(std::string_view name);

// Fills out[i] = N(0, 1) draws for stream `stream` of `seed`, in parallel.
void fill_standard_normal(std::uint64_t seed, std::uint64_t stream, std::span<float> out);

}  // namespace attnsuite::bench
