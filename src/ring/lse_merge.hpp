// Merging partial attention outputs by their log-sum-exp (issue 10). A query row's attention
// over key blocks 1..n is O = Σ_i exp(lse_i − lse) · O_i with lse = log Σ_i exp(lse_i), where
// O_i and lse_i are the row's output and LSE over block i alone. Merged one partial at a time
// into an accumulator; a partial of a row that saw no key (lse_i = −inf) adds nothing, and a
// row that saw no key in any block stays O = 0, lse = −inf, as the problem defines.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>

namespace attnsuite::ring {

// One row: acc_o[0..dv) and *acc_lse take in part_o[0..dv) with part_lse. Both in fp32 (the
// accumulator stays fp32 while partials come in; the result is rounded once, at the end).
inline void merge_row(float* acc_o, float* acc_lse, const float* part_o, float part_lse, int dv) {
  const float a = *acc_lse;
  if (part_lse == -std::numeric_limits<float>::infinity()) return;  // nothing seen in this block
  if (a == -std::numeric_limits<float>::infinity()) {
    for (int d = 0; d < dv; ++d) acc_o[d] = part_o[d];
    *acc_lse = part_lse;
    return;
  }
  // lse = max + log(exp(a − max) + exp(b − max)): never overflows.
  const float hi = a > part_lse ? a : part_lse;
  const float lo = a > part_lse ? part_lse : a;
  const float lse = hi + std::log1p(std::exp(lo - hi));
  const float wa = std::exp(a - lse), wb = std::exp(part_lse - lse);
  for (int d = 0; d < dv; ++d) acc_o[d] = wa * acc_o[d] + wb * part_o[d];
  *acc_lse = lse;
}

// `rows` rows: acc_o and part_o are rows × dv (row-major, dense), the LSEs `rows` floats.
void merge_partials(float* acc_o, float* acc_lse, const float* part_o, const float* part_lse, std::int64_t rows,
                    int dv);

}  // namespace attnsuite::ring
