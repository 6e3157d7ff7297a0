// TMA descriptors of flash3's Q, K and V from its params (the encoder: cuda/hopper/tensor_map.hpp).
#pragma once

#include <cuda.h>

#include "attnsuite/dtype.hpp"
#include "cuda/flash3/params.hpp"
#include "cuda/hopper/tensor_map.hpp"

namespace attnsuite::cuda::flash3 {

using hopper::make_tensor_map;
using hopper::tma_layout_problem;

// The maps of params' Q, K and V (rows of head_dim elements of `dtype`, or e4m3 bytes, with the
// params' strides): boxes of box_columns × q_box_rows for Q, × kv_box_rows for K and V.
struct OperandMaps {
  CUtensorMap q, k, v;
};
OperandMaps operand_maps(const Params& params, DType dtype, bool e4m3, int box_columns, int q_box_rows,
                         int kv_box_rows);

}  // namespace attnsuite::cuda::flash3
