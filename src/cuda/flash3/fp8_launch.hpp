// Host entry point of flash3-fp8 (no CUDA headers: included by host code).
#pragma once

#include <cstddef>

#include "cuda/flash3/params.hpp"

namespace attnsuite::cuda::flash3 {

// Head dims with a compiled flash3-fp8 kernel.
inline constexpr int kFp8HeadDims[] = {64, 128};

// Bytes of device workspace for the e4m3 copies of Q, K, V (dense BSHD, 256-byte aligned) and
// the per-tensor amax / descale words.
std::size_t fp8_workspace_bytes(const Params& params);

// The forward for bf16 `params` (O bf16) on `stream` (a cudaStream_t): a pre-pass quantizes
// Q, K and V per tensor to e4m3 into `workspace` (amax over the tensor, descale = amax / 448),
// then the e4m3 kernel runs with those descales. Throws Error(Unsupported) for a head dim
// without a kernel.
void launch_forward_fp8(const Params& params, void* workspace, void* stream);

}  // namespace attnsuite::cuda::flash3
