// The keys a query row sees under attnsuite's bottom-right aligned mask, in device code: shared
// by the flash2 and flash3 kernels (both Params carry seq_q, seq_kv, window_left, window_right).
#pragma once

#include <cstdint>

namespace attnsuite::cuda {

// Keys [begin, end) that query `row` sees, clamped to [0, seq_kv]: query i keeps keys in
// [diag - window_left, diag + window_right] with diag = i + seq_kv - seq_q; -1 = unbounded.
struct KeyRange {
  int begin;
  int end;
};
template <class Params>
__device__ __forceinline__ KeyRange key_range(const Params& params, std::int64_t row) {
  const std::int64_t diag = row + params.seq_kv - params.seq_q;
  std::int64_t begin = 0, end = params.seq_kv;
  if (params.window_left >= 0) begin = diag - params.window_left;
  if (params.window_right >= 0) end = diag + params.window_right + 1;
  begin = begin < 0 ? 0 : (begin > params.seq_kv ? params.seq_kv : begin);
  end = end < 0 ? 0 : (end > params.seq_kv ? params.seq_kv : end);
  return {static_cast<int>(begin), static_cast<int>(end)};
}

}  // namespace attnsuite::cuda
