// TMA descriptors of the Hopper kernels' operands (flash3's forward and backward, flash3-fp8,
// sage's wgmma kernel), built on the host from the views' pointers and strides. Host code; needs
// only the CUDA headers (the driver's encoder is found at run time through the runtime's driver
// entry point, so nothing links against libcuda).
#pragma once

#include <cuda.h>

#include <cstdint>
#include <string>

#include "attnsuite/dtype.hpp"

namespace attnsuite::cuda::hopper {

// One operand (Q, K or V) as a 4-D TMA view, innermost first: (head_dim, rows, heads, batch)
// with the row/head/batch strides of the view, in elements (the last dim is contiguous).
struct TensorMapShape {
  const void* data = nullptr;
  DType dtype = DType::BF16;
  int head_dim = 0;
  int rows = 0;  // seq_q or seq_kv; TMA zero-fills rows at or past this
  int heads = 0;
  int batch = 0;
  std::int64_t row_stride = 0, head_stride = 0, batch_stride = 0;
  int box_rows = 0;  // rows per copy; every copy is 64 columns (128 bytes) wide, 128B swizzle
  // flash3-fp8: 1-byte e4m3 elements (dtype is then ignored), box_columns wide (64 or 128
  // bytes, swizzled over the whole box row: 64B or 128B).
  bool e4m3 = false;
  int box_columns = 64;
};

// Why TMA cannot read a tensor of element_bytes-byte elements (2: 16-bit, 1: e4m3) with this
// base address and these (batch, row, head) strides in elements, or "" when it can: the base
// must be 16-byte aligned and every stride a positive multiple of 16 bytes below 2^40 bytes.
std::string tma_layout_problem(const void* data, std::int64_t batch_stride, std::int64_t row_stride,
                               std::int64_t head_stride, int element_bytes = 2);

// The encoded descriptor, from a small per-process cache keyed by every field (a benchmark
// repeats the same pointers and shapes). Throws Error(Device) when the driver's encoder is
// missing or refuses the shape.
CUtensorMap make_tensor_map(const TensorMapShape& shape);

// make_tensor_map of the shape with these fields: `columns` (head_dim) and `rows` are the
// extents TMA zero-fills beyond.
CUtensorMap make_tensor_map(const void* data, DType dtype, bool e4m3, int columns, int rows, int heads, int batch,
                            std::int64_t row_stride, std::int64_t head_stride, std::int64_t batch_stride,
                            int box_columns, int box_rows);

}  // namespace attnsuite::cuda::hopper
