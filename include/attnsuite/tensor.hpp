// A non-owning view of a 4-D attention tensor.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

#include "attnsuite/dtype.hpp"

namespace attnsuite {

enum class DeviceType { Cpu, Cuda };

struct Device {
  DeviceType type = DeviceType::Cpu;
  int index = 0;
  friend bool operator==(const Device&, const Device&) = default;
};

std::string_view to_string(DeviceType type);

// Memory order of Q/K/V/O: BSHD (batch, seq, heads, dim — FlashAttention's and the usual
// "[B, N, H, D]" projection output) or BHSD (PyTorch SDPA's [B, H, N, D]).
enum class Layout { BSHD, BHSD };

std::string_view to_string(Layout layout);

// The view's logical dimensions are always (batch, seq, heads, dim), whatever the memory order:
// the layout only decides the strides. Strides are in elements. Backends index through
// the strides and need only that the last dimension is contiguous unless they say otherwise.
struct TensorView {
  void* data = nullptr;
  DType dtype = DType::F32;
  Device device{};
  std::array<std::int64_t, 4> shape{};    // batch, seq, heads, dim
  std::array<std::int64_t, 4> strides{};  // in elements
  // An e4m3 view's per-tensor scale: the real value of an element is e4m3 × descale. Views of
  // the other dtypes hold their values as they are and leave it 1.
  float descale = 1.0f;

  bool empty() const { return data == nullptr; }
  std::int64_t numel() const { return shape[0] * shape[1] * shape[2] * shape[3]; }
  std::int64_t offset(std::int64_t b, std::int64_t s, std::int64_t h, std::int64_t d) const {
    return b * strides[0] + s * strides[1] + h * strides[2] + d * strides[3];
  }
  // The real value of the element at `offset` (in elements) as float: e4m3 × descale for e4m3.
  float load(std::int64_t offset) const {
    const float value = load_as_float(data, dtype, offset);
    return dtype == DType::E4M3 ? value * descale : value;
  }
  // True when the elements fill one dense block of numel() elements (any permutation of dims).
  bool is_dense() const;

  // Dense strides for a shape (b, s, h, d) laid out in the given order.
  static std::array<std::int64_t, 4> dense_strides(const std::array<std::int64_t, 4>& shape, Layout layout);
};

// The log-sum-exp output: float32, logical shape (batch, heads, seq_q), dense.
struct LseView {
  float* data = nullptr;
  Device device{};
  bool empty() const { return data == nullptr; }
};

}  // namespace attnsuite
