// Host entry of sage's Hopper (sm_90a, wgmma) kernels (no CUDA headers: included by sage.cpp).
// Built only with ATTNSUITE_FLASH3 (they use flash3's TMA descriptors and PTX wrappers), in an
// sm_90a-only object library (src/cuda/CMakeLists.txt).
#pragma once

#include <string>

#include "attnsuite/dtype.hpp"
#include "cuda/sage/params.hpp"

namespace attnsuite::cuda::sage {

// Why the wgmma kernel cannot read these operands through TMA, or "" when it can: sage reads
// the caller's 16-bit V through a tensor map (base 16-byte aligned, strides positive multiples
// of 16 bytes); sage2 reads only the quantizer's buffers. Empty sequences go to the mma kernel.
std::string wgmma_layout_problem(Mode mode, const Params& params);

// The attention kernel for `mode` on sm_90a (dtype = the 16-bit dtype of V and O), on `stream`;
// `schedule`: the consumers' schedule (params.hpp; kernel configs "wgmma" = overlap,
// "wgmma-pingpong", "wgmma-serial"); fma_exp2_every: 0, or 8 with sage2 ping-pong ("wgmma-pingpong-fmaexp":
// every 8th 8-key group's exponentials on the FMA pipe). Throws Error(Unsupported) for a (dtype,
// head dim) without a kernel, Error(Internal) for an fma_exp2_every without one.
void launch_forward_wgmma(Mode mode, const Params& params, DType dtype, Schedule schedule, int fma_exp2_every,
                          void* stream);

}  // namespace attnsuite::cuda::sage
