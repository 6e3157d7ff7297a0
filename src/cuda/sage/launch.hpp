// Host entry points of the sage kernels (no CUDA headers: included by host code and tests).
#pragma once

#include "attnsuite/dtype.hpp"
#include "cuda/sage/params.hpp"

namespace attnsuite::cuda::sage {

inline constexpr int kSupportedHeadDims[] = {64, 128};

// The quantization kernels (quant.cu), each on `stream` (a cudaStream_t).
void launch_stats(const StatsParams& params, DType dtype, void* stream);
void launch_quantize_rows(const QuantParams& params, DType dtype, void* stream);
// Q's and K's rows passes in one launch (option quant_qk=fused; opt-in: 1.00-1.01x on the H100).
void launch_quantize_q_and_k(const QuantParams& q, const QuantParams& k, DType dtype, void* stream);
void launch_quantize_v(const VQuantParams& params, DType dtype, void* stream);

// The attention kernel for `mode` (dtype = the 16-bit dtype of V and O). Throws
// Error(Unsupported) for a (dtype, head dim) without a kernel.
void launch_forward(Mode mode, const Params& params, DType dtype, void* stream);

// The architecture (e.g. 90) of the code this build runs on the current device: the sm_80 pass
// compiles sage2's FP8 MMAs as a trap, so sage2 needs 89 or more here (an sm_89 GPU runs this
// build's sm_80 code). Throws Error(Device) when the runtime cannot say.
int binary_arch_on_current_device();

}  // namespace attnsuite::cuda::sage
