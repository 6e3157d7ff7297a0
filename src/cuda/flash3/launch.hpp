// Host entry point of the flash3 kernels (no CUDA headers: included by host code).
#pragma once

#include "attnsuite/dtype.hpp"
#include "cuda/common/kernel_params.hpp"
#include "cuda/flash3/params.hpp"

namespace attnsuite::cuda::flash3 {

// Head dims with a compiled kernel, for supports() and error messages.
inline constexpr int kSupportedHeadDims[] = {64, 128, 256};

// Runs the forward for params on `stream` (a cudaStream_t): builds (or finds cached) the TMA
// descriptors of Q, K and V, then launches. Throws Error(Unsupported) for a (dtype, head dim)
// without a kernel, listing those that have one.
void launch_forward(const Params& params, DType dtype, void* stream);

// The same with kernel config "m192" (three consumer warpgroups, 192-row Q tiles; the v2
// schedule whatever params.serial_schedule says). Head dim 64 only: throws Error(Unsupported)
// for another head dim or dtype.
void launch_forward_m192(const Params& params, DType dtype, void* stream);

// The same with kernel config "m192-fmaexp" (m192 with 1/8 of the softmax's exponentials on
// the FMA pipe; opt-in, slower than m192 where measured). Head dim 64 only.
void launch_forward_m192_fmaexp(const Params& params, DType dtype, void* stream);

// The same with kernel config "n176" (176-key K/V tiles at head dim 128). Head dim 128 only:
// throws Error(Unsupported) for another head dim or dtype.
void launch_forward_n176(const Params& params, DType dtype, void* stream);

// Head dims with a compiled backward (BackwardConfig: dQ's tile splits into two 64 × 64 tiles).
inline constexpr int kBackwardHeadDims[] = {64, 128};

// The backward for params on `stream`: dq, dk, dv from q, k, v, o, d_o and the forward's lse, with
// the workspace pieces set (common/backward_workspace.hpp: dQ summed in fp32 there). bulk_dq: the
// sums by TMA bulk reduce-adds from shared memory (backward_dq=bulk; experimental, not yet run on
// a GPU), else by float2 reductions. Throws Error(Unsupported) for a (dtype, head dim) without a
// kernel.
void launch_backward(const BackwardParams& params, DType dtype, bool bulk_dq, void* stream);

}  // namespace attnsuite::cuda::flash3
