#include "attnsuite/tensor.hpp"

#include <algorithm>
#include <numeric>

namespace attnsuite {

std::string_view to_string(DeviceType type) { return type == DeviceType::Cpu ? "cpu" : "cuda"; }

std::string_view to_string(Layout layout) { return layout == Layout::BSHD ? "bshd" : "bhsd"; }

std::array<std::int64_t, 4> TensorView::dense_strides(const std::array<std::int64_t, 4>& shape, Layout layout) {
  const std::int64_t b = shape[0], s = shape[1], h = shape[2], d = shape[3];
  (void)b;
  if (layout == Layout::BSHD) return {s * h * d, h * d, d, 1};
  return {h * s * d, d, s * d, 1};
}

bool TensorView::is_dense() const {
  std::array<int, 4> order{0, 1, 2, 3};
  std::sort(order.begin(), order.end(), [&](int a, int b) { return strides[a] < strides[b]; });
  std::int64_t expected = 1;
  for (int dim : order) {
    if (shape[dim] != 1 && strides[dim] != expected) return false;
    expected *= shape[dim];
  }
  return true;
}

}  // namespace attnsuite
