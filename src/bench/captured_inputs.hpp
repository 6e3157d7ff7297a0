// Captured Q/K/V from files, as input generators: "npy:DIR" (DIR/q.npy, k.npy, v.npy) and
// "safetensors:FILE" (tensors named q, k, v). Both formats are parsed here (the safetensors
// header with nlohmann-json); errors name the file and what is wrong (dtype, shape, layout).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace attnsuite::bench {

struct GeneratorInfo;

// A loaded tensor as fp32, with its shape as stored.
struct LoadedTensor {
  std::vector<std::int64_t> shape;
  std::vector<float> values;
};
// Throws Error(Usage) naming the file: unreadable, not the format, dtype not one of
// f32/f16/bf16/f64, Fortran order, truncated data. header_only: shape without the values.
LoadedTensor load_npy(const std::string& path, bool header_only = false);
LoadedTensor load_safetensors(const std::string& path, const std::string& tensor, bool header_only = false);

// The generator for "npy:DIR" or "safetensors:FILE" (headers checked now); kept for the
// process's lifetime.
const GeneratorInfo& captured_generator(std::string_view name);

}  // namespace attnsuite::bench
