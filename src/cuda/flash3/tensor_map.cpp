// flash3's operand maps (tensor_map.hpp).
#include "cuda/flash3/tensor_map.hpp"

namespace attnsuite::cuda::flash3 {

OperandMaps operand_maps(const Params& params, DType dtype, bool e4m3, int box_columns, int q_box_rows,
                         int kv_box_rows) {
  auto operand = [&](const void* data, int rows, int heads, std::int64_t batch_stride, std::int64_t row_stride,
                     std::int64_t head_stride, int box_rows) {
    return make_tensor_map(data, dtype, e4m3, params.head_dim, rows, heads, params.batch, row_stride, head_stride,
                           batch_stride, box_columns, box_rows);
  };
  return {operand(params.q, params.seq_q, params.heads_q, params.q_batch_stride, params.q_row_stride,
                  params.q_head_stride, q_box_rows),
          operand(params.k, params.seq_kv, params.heads_kv, params.k_batch_stride, params.k_row_stride,
                  params.k_head_stride, kv_box_rows),
          operand(params.v, params.seq_kv, params.heads_kv, params.v_batch_stride, params.v_row_stride,
                  params.v_head_stride, kv_box_rows)};
}

}  // namespace attnsuite::cuda::flash3
