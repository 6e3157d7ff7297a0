// The online-softmax step that flash3 and flash3-fp8 share: one score tile of a consumer thread
// (two rows, kTileN / 4 scores each, already masked) folded into the rows' running maximum and
// sum, leaving P in place of the scores and the rows' correction of O.
#pragma once

#include "cuda/hopper/primitives.cuh"

namespace attnsuite::cuda::flash3 {

using namespace hopper;  // the Hopper PTX wrappers (hopper/primitives.cuh)

// acc_s: entries 4i + 2·half + e (row half, columns 8i + 2·quad_col + e), in raw score units;
// scale_log2: softmax scale · log2 e (flash3-fp8: times the Q and K descales). Maximum and sum
// are balanced trees (tree_reduce; serial chains cost sage2 7–9% on the H200, 2026-12-04).
// kFmaExp2Every > 0: the exponentials of every kFmaExp2Every-th 8-key group are computed on the
// FMA pipe (softmax_exp2, hopper/primitives.cuh) instead of MUFU, which sets the pace at d64
// (kernel config "m192-fmaexp"); 0 (every other config): all on MUFU.
template <int kTileN, int kFmaExp2Every = 0>
__device__ __forceinline__ void online_softmax_tile(float (&acc_s)[kTileN / 2], float (&row_max)[2],
                                                    float (&row_sum)[2], float scale_log2, float (&correction)[2]) {
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    float partial[kTileN / 8];
#pragma unroll
    for (int i = 0; i < kTileN / 8; ++i) partial[i] = fmaxf(acc_s[4 * i + 2 * half], acc_s[4 * i + 2 * half + 1]);
    const float tile_max = tree_reduce(partial, [](float a, float b) { return fmaxf(a, b); });
    const float new_max = fmaxf(row_max[half], quad_max(tile_max));
    // A row that has seen no key yet keeps max -inf; subtracting 0 then keeps its p at 0
    // (2^-inf) instead of NaN (-inf − -inf).
    const float max_scaled = new_max == -INFINITY ? 0.0f : new_max * scale_log2;
    correction[half] = exp2_approx(row_max[half] * scale_log2 - max_scaled);
    row_max[half] = new_max;
#pragma unroll
    for (int i = 0; i < kTileN / 8; ++i) {
      float p[2];
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const float x = fmaf(acc_s[4 * i + 2 * half + e], scale_log2, -max_scaled);
        p[e] = softmax_exp2<kFmaExp2Every>(i, x);
        acc_s[4 * i + 2 * half + e] = p[e];
      }
      partial[i] = p[0] + p[1];
    }
    const float sum = tree_reduce(partial, [](float a, float b) { return a + b; });
    row_sum[half] = row_sum[half] * correction[half] + sum;
  }
}

}  // namespace attnsuite::cuda::flash3
