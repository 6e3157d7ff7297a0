// Input generation on the GPU: the device-capable generators of src/core/generator_math.hpp,
// written straight into a strided device tensor, bitwise equal to the host's values.
#pragma once

#include <cstdint>

#include "core/generator_math.hpp"

namespace attnsuite::cuda {

// A (batch, seq, heads, dim) tensor on the device: element (b, s, h, d) is at
// data + (b·strides[0] + s·strides[1] + h·strides[2] + d·strides[3]) elements; element size by
// dtype_code (0 = fp32, 1 = fp16, 2 = bf16).
struct GenerateTarget {
  void* data = nullptr;
  std::int64_t shape[4] = {0, 0, 0, 0};
  std::int64_t strides[4] = {0, 0, 0, 0};
  int dtype_code = 0;
};

// Writes genmath::value(kind, key, i) for every dense (b, s, h, d) index i, rounded to the
// tensor's dtype (round to nearest even, as the host's conversion). stream: a cudaStream_t.
void generate_on_device(const GenerateTarget& target, bench::genmath::Kind kind, std::uint64_t key, void* stream);

}  // namespace attnsuite::cuda
