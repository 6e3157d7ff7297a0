// Dispatch of flash3's backward from the run-time (dtype, head dim, epilogue, order) to the compiled
// instantiations.
#include "attnsuite/error.hpp"
#include "cuda/common/backward_rows.hpp"
#include "cuda/common/dispatch.hpp"
#include "cuda/flash3/backward_traits.cuh"
#include "cuda/flash3/launch.hpp"
#include "cuda/flash3/run_backward.cuh"

namespace attnsuite::cuda::flash3 {
namespace {

// Whether every query tile of `tile_rows` rows has a row that sees a key: the fused dQ conversion
// writes only the tiles some CTA adds into.
bool every_query_tile_sees_a_key(const BackwardParams& params, int tile_rows) {
  const RowRange rows =
      rows_seeing_keys(params.seq_q, params.seq_kv, params.window_left, params.window_right, 0, params.seq_kv);
  const int tiles = (params.seq_q + tile_rows - 1) / tile_rows;
  return rows.begin < rows.end && rows.begin < tile_rows && rows.end > (tiles - 1) * tile_rows;
}

}  // namespace

void launch_backward(const BackwardParams& params, DType dtype, BackwardVariant variant, void* stream) {
  dispatch_16bit(dtype, "flash3 backward", [&](auto element) {
    dispatch_head_dim<64, 128>(params.head_dim, "flash3 backward", [&](auto head_dim) {
      using Element = typename decltype(element)::type;
      constexpr int kHeadDim = decltype(head_dim)::value;
      const auto cuda_stream = static_cast<cudaStream_t>(stream);
      if (variant.grouped_heads) {
        if (!backward_variant_built(variant))
          throw Error(ErrorKind::Unsupported,
                      "flash3 backward: backward_order=grouped-4 is built with each head dim's default epilogue only");
        constexpr bool kWide = wide_epilogue(BackwardVariant{}, kHeadDim);
        if (variant.fused_dq &&
            every_query_tile_sees_a_key(params, BackwardConfig<Element, kHeadDim, kWide>::Kernel::kTileM))
          return run_backward<Element, kHeadDim, kWide, 4, true>(params, cuda_stream, variant.vector_preprocess);
        return run_backward<Element, kHeadDim, kWide, 4>(params, cuda_stream, variant.vector_preprocess);
      }
      if (wide_epilogue(variant, kHeadDim))
        return run_backward<Element, kHeadDim, true>(params, cuda_stream, variant.vector_preprocess);
      run_backward<Element, kHeadDim, false>(params, cuda_stream, variant.vector_preprocess);
    });
  });
}

}  // namespace attnsuite::cuda::flash3
