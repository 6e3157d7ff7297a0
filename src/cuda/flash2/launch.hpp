// Host entry point of the flash2 kernels (no CUDA headers: included by host code).
#pragma once

#include "attnsuite/dtype.hpp"
#include "cuda/flash2/params.hpp"

namespace attnsuite::cuda::flash2 {

// Head dims with a compiled kernel, for supports() and error messages.
inline constexpr int kSupportedHeadDims[] = {64, 128, 256};

// Runs the forward for params on `stream` (a cudaStream_t). Throws Error(Unsupported) for a
// (dtype, head dim) without a kernel, listing those that have one.
void launch_forward(const Params& params, DType dtype, void* stream);

// Head dims with a compiled backward. 256 has none: a warp keeps dK and dV of its 16 keys in
// registers, 2 × 256 / 2 = 256 fp32 per thread, above the 255 a thread can have.
inline constexpr int kBackwardHeadDims[] = {64, 128};

// The backward's main kernel (backward_kernel.cuh, backward_tiles_kernel.cuh): the key-row kernel
// with 64 or 128 keys a CTA (each warp owns 16 keys), or the tiled one (FlashAttention-2's split
// of every product among 8 warps, 128 keys; experimental, not yet run on a GPU).
enum class BackwardMain { KeyRows64, KeyRows128, Tiles };

// Runs the backward for params on `stream` (a cudaStream_t): dq, dk, dv from q, k, v, o, d_o and
// the forward's lse, with the workspace pieces set (make_backward_params, flash2.hpp). Throws
// Error(Unsupported) for a (dtype, head dim) without a kernel. main: the main kernel (the backend
// options backward_key_tile and backward_split); vector_preprocess: the preprocess with 16-byte
// accesses (backward_preprocess=vector), else one warp a row.
void launch_backward(const BackwardParams& params, DType dtype, BackwardMain main, bool vector_preprocess,
                     void* stream);

}  // namespace attnsuite::cuda::flash2
