// Host entry point of flash3-fp8 (no CUDA headers: included by host code).
#pragma once

#include <cstddef>

#include "cuda/flash3/params.hpp"

namespace attnsuite::cuda::flash3 {

// Head dims with a compiled flash3-fp8 kernel.
inline constexpr int kFp8HeadDims[] = {64, 128};

// Which kernel runs the works (flash3_fp8.cpp chooses, from backend option forward_order or its
// rule): Grid, one CTA per 128-row query tile; HeadMajor, the works head-major from a 1-D grid
// (params.persistent: min(works, SMs) CTAs that loop, else one CTA per work); Paired, units of a
// head's longest and shortest query tiles (causal problems), one CTA a unit.
enum class Fp8Order { Grid, HeadMajor, Paired };

// Bytes of device workspace for the e4m3 copies of Q, K, V (dense BSHD, 256-byte aligned) and
// the per-tensor amax / descale words.
std::size_t fp8_workspace_bytes(const Params& params);

// The forward for bf16 `params` (O bf16) on `stream` (a cudaStream_t): a pre-pass quantizes
// Q, K and V per tensor to e4m3 into `workspace` (amax over the tensor, descale = amax / 448),
// then the e4m3 kernel runs with those descales. Throws Error(Unsupported) for a head dim
// without a kernel.
void launch_forward_fp8(const Params& params, void* workspace, Fp8Order order, void* stream);

// Bytes of device workspace of launch_forward_fp8_e4m3: the three descales.
inline constexpr std::size_t kFp8E4m3WorkspaceBytes = 256;

// The forward for e4m3 `params` (Q, K, V e4m3 through their strides, O bf16) on `stream`: no
// pre-pass; the descales (q, k, v: real value = e4m3 × descale) are written into `workspace`
// (kFp8E4m3WorkspaceBytes) for the same e4m3 kernel. Throws Error(Unsupported) for a head dim
// without a kernel.
void launch_forward_fp8_e4m3(const Params& params, const float (&descales)[3], void* workspace, Fp8Order order,
                             void* stream);

}  // namespace attnsuite::cuda::flash3
