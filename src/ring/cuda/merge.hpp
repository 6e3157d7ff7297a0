// The ring's device-side LSE merge (issue 10): partial outputs of the local kernel merged into
// fp32 accumulators, and the accumulators rounded once into the output dtype. Included by merge.cu: C++17 only.
#pragma once

#include <cstdint>

#include "attnsuite/dtype.hpp"  // C++17 (included by device code)

namespace attnsuite::cuda::ring_kernels {

// stream: a cudaStream_t.

// acc_o / part_o: dense (batch, length, heads, dv); acc_lse / part_lse: (batch, heads, length).
// part_o is in `dtype` (fp16/bf16), the rest fp32. Merges by ring::merge_row's rule: a partial
// with lse = −inf adds nothing.
void launch_merge(float* acc_o, float* acc_lse, const void* part_o, const float* part_lse, DType dtype,
                  std::int64_t batch, std::int64_t length, std::int64_t heads, int dv, void* stream);
// acc_o = 0, acc_lse = −inf over `rows` = batch·heads·length rows.
void launch_init(float* acc_o, float* acc_lse, std::int64_t rows, int dv, void* stream);
// out (dtype) = acc_o rounded, `count` elements.
void launch_round(void* out, const float* acc_o, DType dtype, std::int64_t count, void* stream);

}  // namespace attnsuite::cuda::ring_kernels
