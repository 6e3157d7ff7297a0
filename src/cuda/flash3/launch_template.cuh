// Launch of one flash3 configuration. Included only by the instantiation TUs.
#pragma once

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "attnsuite/error.hpp"
#include "cuda/common/check.hpp"
#include "cuda/common/launch.cuh"
#include "cuda/flash3/kernel.cuh"
#include "cuda/flash3/run_forward.cuh"
#include "cuda/flash3/tensor_map.hpp"
#include "cuda/flash3/traits.cuh"

namespace attnsuite::cuda::flash3 {

template <class Kernel>
void run_kernel(const Params& params, cudaStream_t stream) {
  constexpr DType kDType = std::is_same_v<typename Kernel::Element, __half> ? DType::F16 : DType::BF16;
  const OperandMaps maps = operand_maps(params, kDType, false, 64, Kernel::kTileM, Kernel::kTileN);
  Params launch = params;
  launch.q_tiles = (params.seq_q + Kernel::kTileM - 1) / Kernel::kTileM;
  const std::int64_t works = std::int64_t{launch.q_tiles} * params.heads_q * params.batch;
  if (works > std::numeric_limits<int>::max()) {
    throw Error(ErrorKind::Unsupported,
                fmt::format("flash3: {} query tiles × {} heads × batch {} = {} work tiles; at most {}", launch.q_tiles,
                            params.heads_q, params.batch, works, std::numeric_limits<int>::max()));
  }
  launch.works = static_cast<int>(works);
  int ctas = launch.works;
  // Paired: a CTA's unit is two works (hopper/scheduler.cuh).
  if constexpr (Kernel::kOrder == hopper::WorkOrder::Paired || Kernel::kOrder == hopper::WorkOrder::PairedCompact)
    ctas = static_cast<int>(hopper::PersistentPairedSchedule::units(launch.q_tiles, params.heads_q * params.batch));
  if (params.persistent) {
    // One CTA per SM (the kernels' shared memory allows no second): every SM runs one.
    int device = 0, sms = 0;
    ATTNSUITE_CUDA_CHECK(cudaGetDevice(&device));
    ATTNSUITE_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    ctas = std::min(ctas, std::max(sms, 1));
  }
  launch_kernel(flash3_forward_kernel<Kernel>, dim3(static_cast<unsigned>(ctas)), Kernel::kThreads, Kernel::kSmemBytes,
                stream, launch, maps.q, maps.k, maps.v);
  ATTNSUITE_CUDA_CHECK_LAUNCH("flash3_forward_kernel");
}

template <class Element, int kHeadDim>
void run_forward(const Params& params, cudaStream_t stream) {
  run_kernel<typename Config<Element, kHeadDim>::Kernel>(params, stream);
}

template <template <class> class Config, class Element>
void run_forward_config(const Params& params, cudaStream_t stream) {
  run_kernel<typename Config<Element>::Kernel>(params, stream);
}

}  // namespace attnsuite::cuda::flash3
