// From the run-time dtype and head dim to the compiled instantiations, with the one error every
// launcher gives for a value it has no kernel for (the value and what is allowed). Host code;
// included by .cu (C++17) and .cpp files.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <fmt/format.h>

#include <string>
#include <type_traits>

#include "attnsuite/dtype.hpp"
#include "attnsuite/error.hpp"

namespace attnsuite::cuda {

// A type as a value (std::type_identity is C++20).
template <class T>
struct TypeTag {
  using type = T;
};

// run(TypeTag<__half>{}) for fp16, run(TypeTag<__nv_bfloat16>{}) for bf16; another dtype throws
// Error(Unsupported) naming `kernel`.
template <class Run>
void dispatch_16bit(DType dtype, const char* kernel, Run&& run) {
  switch (dtype) {
    case DType::F16:
      return run(TypeTag<__half>{});
    case DType::BF16:
      return run(TypeTag<__nv_bfloat16>{});
    default:
      throw Error(ErrorKind::Unsupported,
                  fmt::format("dtype {} not supported by {}; allowed: fp16, bf16", to_string(dtype), kernel));
  }
}

// run(std::integral_constant<int, D>{}) for head_dim D, one of kHeadDims; another throws
// Error(Unsupported) naming `kernel` and listing them.
template <int... kHeadDims, class Run>
void dispatch_head_dim(int head_dim, const char* kernel, Run&& run) {
  if (((head_dim == kHeadDims ? (run(std::integral_constant<int, kHeadDims>{}), true) : false) || ...)) return;
  std::string allowed;
  ((allowed += (allowed.empty() ? "" : ", ") + std::to_string(kHeadDims)), ...);
  throw Error(ErrorKind::Unsupported,
              fmt::format("head dim {} not supported by {}; allowed: {}", head_dim, kernel, allowed));
}

}  // namespace attnsuite::cuda
