// Launching a fused attention kernel: its grid, its dynamic shared memory opted into.
// Host code of the launch templates (.cu).
#pragma once

#include <cuda_runtime.h>

#include <utility>

#include "cuda/common/check.hpp"

namespace attnsuite::cuda {

// One CTA per (query tile of kTileM rows, q head, batch), the kernels' grid when not persistent.
template <int kTileM, class Params>
dim3 query_tile_grid(const Params& params) {
  return dim3(static_cast<unsigned>((params.seq_q + kTileM - 1) / kTileM), static_cast<unsigned>(params.heads_q),
              static_cast<unsigned>(params.batch));
}

// kernel<<<grid, threads, smem_bytes, stream>>>(args...); the caller checks the launch
// (ATTNSUITE_CUDA_CHECK_LAUNCH, with the kernel's name). The shared memory attribute is set on
// every launch, per device and cheap (no synchronization): a second GPU gets it too; beyond
// 48 KiB dynamic shared memory must be opted into.
template <class... Parameters, class... Args>
void launch_kernel(void (*kernel)(Parameters...), dim3 grid, int threads, int smem_bytes, cudaStream_t stream,
                   Args&&... args) {
  ATTNSUITE_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes));
  kernel<<<grid, threads, smem_bytes, stream>>>(std::forward<Args>(args)...);
}

}  // namespace attnsuite::cuda
