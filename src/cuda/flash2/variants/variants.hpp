// Experimental flash2 configurations (see variants.cu). Host-visible: no CUDA headers.
#pragma once

#include <cstddef>

#include "cuda/flash2/params.hpp"

namespace attnsuite::cuda::flash2 {

struct Variant {
  const char* name;                                    // backend name suffix: flash2-x-<name>
  int head_dim;                                        // the one head dim it is compiled for (bf16 only)
  void (*launch)(const Params& params, void* stream);  // stream: a cudaStream_t
};

// The compiled variants: variants()[0 .. variant_count()).
const Variant* variants();
std::size_t variant_count();

}  // namespace attnsuite::cuda::flash2
