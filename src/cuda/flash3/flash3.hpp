#pragma once

#include <memory>
#include <string_view>

#include "attnsuite/backend.hpp"

namespace attnsuite::cuda {

// `flash3`: the sm_90a (Hopper) kernel. Built and registered only with -DATTNSUITE_FLASH3=ON.
std::unique_ptr<Backend> make_flash3_backend();

// `flash3-fp8`: the e4m3 variant (bf16 in, per-tensor quantization pre-pass, bf16 out); same build option.
std::unique_ptr<Backend> make_flash3_fp8_backend();

// "<backend> needs sm_90 (Hopper); this GPU is sm_XY" unless the current device is sm_90.
Support supports_hopper(std::string_view backend);

}  // namespace attnsuite::cuda
