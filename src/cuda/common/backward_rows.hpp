// Which query rows see a range of keys, under attnsuite's bottom-right aligned mask (the inverse
// of key_range, common/key_range.cuh): the backward kernels' CTAs (flash2's, flash3's) own key
// tiles and visit only the query tiles that see them. Plain C++ usable on the host (tested against AttentionProblem's
// key_begin and key_end without a GPU) and on the device.
#pragma once

#include <cstdint>

#include "cuda/common/host_device.hpp"

namespace attnsuite::cuda {

// seq_q is padded to a multiple of this in the backward's workspace (the LSE, D and fp32 dQ rows),
// so that every query tile of up to this many rows (flash2's 32 and 64, flash3's 64 and 128)
// has all its rows there.
inline constexpr int kBackwardRowPadding = 128;

struct RowRange {
  int begin;
  int end;  // empty when begin >= end
};

// Rows [begin, end) of [0, seq_q) that see at least one key of [key_begin, key_end), where
// 0 <= key_begin < key_end <= seq_kv. The mask as in AttentionParams: query i keeps keys in
// [diag - window_left, diag + window_right] with diag = i + seq_kv - seq_q, clamped to
// [0, seq_kv]; -1 = unbounded (causal is window_right = min(window_right, 0)). Row i sees one
// iff its first key is below key_end and its end above key_begin; both are nondecreasing in i,
// so the rows form one range:
//   end(i) > key_begin  ⟺  i >= key_begin - window_right + seq_q - seq_kv
//   begin(i) < key_end  ⟺  i <  key_end + window_left + seq_q - seq_kv
ATTNSUITE_HOST_DEVICE RowRange rows_seeing_keys(int seq_q, int seq_kv, int window_left, int window_right, int key_begin,
                                                int key_end) {
  const std::int64_t shift = static_cast<std::int64_t>(seq_q) - seq_kv;
  std::int64_t first = 0, last = seq_q;
  if (window_right >= 0) first = key_begin - static_cast<std::int64_t>(window_right) + shift;
  if (window_left >= 0) last = key_end + static_cast<std::int64_t>(window_left) + shift;
  first = first < 0 ? 0 : (first > seq_q ? seq_q : first);
  last = last < 0 ? 0 : (last > seq_q ? seq_q : last);
  return {static_cast<int>(first), static_cast<int>(last)};
}

// The mask of the same rule as a test on key − row, for the element loops: key j is hidden from
// row i iff i >= seq_q, j >= seq_kv, j − i < lowest or j − i > highest. (Inside [0, seq_kv) the
// clamping of key_range changes nothing: j < clamp(diag − window_left) ⟺ j < diag − window_left
// for 0 <= j < seq_kv, and likewise for the end.)
struct MaskBounds {
  int seq_q, seq_kv;
  int lowest, highest;  // of key − row; clamped to the int range (no window: ∓2^31)

  ATTNSUITE_HOST_DEVICE bool hidden(int row, int key) const {
    const int offset = key - row;
    return row >= seq_q || key >= seq_kv || offset < lowest || offset > highest;
  }
};

ATTNSUITE_HOST_DEVICE MaskBounds mask_bounds(int seq_q, int seq_kv, int window_left, int window_right) {
  const std::int64_t shift = static_cast<std::int64_t>(seq_kv) - seq_q;
  constexpr std::int64_t kMin = -2147483647 - 1, kMax = 2147483647;
  std::int64_t lowest = kMin, highest = kMax;
  if (window_left >= 0) lowest = shift - window_left;
  if (window_right >= 0) highest = shift + window_right;
  lowest = lowest < kMin ? kMin : lowest;
  highest = highest > kMax ? kMax : highest;
  return {seq_q, seq_kv, static_cast<int>(lowest), static_cast<int>(highest)};
}

}  // namespace attnsuite::cuda
