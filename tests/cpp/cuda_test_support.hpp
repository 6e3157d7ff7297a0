// Test support for the CUDA backends' test files (test_cuda_backends.cpp, test_cuda_flash2.cpp,
// test_cuda_flash3.cpp, test_cuda_flash3_fp8.cpp, test_cuda_ring.cpp): running a backend's plan
// on the GPU, and checking its output against an fp64 CPU reference (gpu_test_support.hpp) on
// fresh random inputs, every element compared. The bound is dtype-aware: a backend may be off
// the fp64 result by at most twice what a naive implementation in the same dtype is off (inputs
// in that dtype, fp32 accumulation, P rounded to the dtype before P·V, output rounded; scores
// rounded too for cuda-vanilla, which materializes them in the dtype by design), plus a floor of
// a few output ulps. Outputs are poisoned with NaN before every run; NaN never passes.
#pragma once

#if ATTNSUITE_HAVE_CUDA

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "attnsuite/attnsuite.hpp"
#include "attnsuite/device_context.hpp"
#include "cuda/cuda_backends.hpp"
#include "gpu_test_support.hpp"

namespace attnsuite::testing_support {

struct DeviceRun {
  std::vector<std::uint16_t> out_bits;  // in the layout of Q
  std::vector<float> lse;
  std::string kernel_config;  // RunReport::kernel_config of the run
};

// PlanOptions with kernel config `config` ("": the backend's choice).
inline PlanOptions with_config(const std::string& config) {
  PlanOptions options;
  options.kernel_config = config;
  return options;
}

// Copies the inputs to the GPU, poisons O and LSE, plans and runs the backend, copies back.
inline DeviceRun run_on_device(const std::string& backend_name, const AttentionProblem& p, const Inputs& in,
                               const PlanOptions& options = {}) {
  auto context = cuda::make_cuda_context(0);
  const Backend& backend = Registry::global().find(backend_name);
  const std::unique_ptr<KernelPlan> plan = backend.plan(p, options);
  const HostTensor o_layout({p.batch, p.seq_q, p.heads_q, p.dim_v()}, p.layout);
  auto q = context->allocate(in.q.bytes()), k = context->allocate(in.k.bytes()), v = context->allocate(in.v.bytes()),
       o = context->allocate(o_layout.bytes());
  const std::size_t lse_bytes = sizeof(float) * p.batch * p.heads_q * p.seq_q;
  auto lse = context->allocate(lse_bytes);
  context->copy_to_device(q->data(), in.q.bits.data(), in.q.bytes());
  context->copy_to_device(k->data(), in.k.bits.data(), in.k.bytes());
  context->copy_to_device(v->data(), in.v.bits.data(), in.v.bytes());
  context->poison(o->data(), o_layout.bytes());
  context->poison(lse->data(), lse_bytes);

  const Device device = context->device();
  auto view = [&](void* data, const HostTensor& t) { return TensorView{data, p.dtype, device, t.shape, t.strides}; };
  AttentionArgs args;
  args.q = view(q->data(), in.q);
  args.k = view(k->data(), in.k);
  args.v = view(v->data(), in.v);
  args.o = view(o->data(), o_layout);
  args.lse = LseView{static_cast<float*>(lse->data()), device};
  // Backends with a workspace (flash3-fp8: the e4m3 copies) get one, as the bench runner does.
  const std::size_t workspace_bytes = plan->workspace_bytes();
  std::unique_ptr<bench::DeviceAllocation> workspace;
  if (workspace_bytes > 0) {
    workspace = context->allocate(workspace_bytes);
    args.workspace = workspace->data();
  }
  const RunReport report = plan->forward(args, context->stream());
  context->synchronize();

  DeviceRun run{std::vector<std::uint16_t>(o_layout.bits.size()), std::vector<float>(p.batch * p.heads_q * p.seq_q),
                report.kernel_config};
  context->copy_to_host(run.out_bits.data(), o->data(), o_layout.bytes());
  context->copy_to_host(run.lse.data(), lse->data(), lse_bytes);
  return run;
}

// Checks one backend on one problem with fresh random inputs; returns the kernel config that ran.
inline std::string check_backend(const std::string& backend_name, const AttentionProblem& p,
                                 const PlanOptions& options = {}) {
  const std::uint64_t seed = std::random_device{}();
  SCOPED_TRACE(backend_name + " " + p.describe() + " seed " + std::to_string(seed));
  const Backend& backend = Registry::global().find(backend_name);
  const Support support = backend.supports(p);
  EXPECT_TRUE(support.ok) << support.reason;
  if (!support.ok) return {};

  const Inputs in = random_inputs(p, seed);
  const DeviceRun run = run_on_device(backend_name, p, in, options);
  const Result ref = reference_f64(p, in);
  const Result naive = naive_same_dtype(p, in, /*round_scores=*/backend_name == "cuda-vanilla");

  // The device output, read through Q's layout into (b, h, i, d) order.
  const HostTensor o_layout({p.batch, p.seq_q, p.heads_q, p.dim_v()}, p.layout);
  std::vector<double> got(ref.out.size());
  for (std::int64_t b = 0; b < p.batch; ++b)
    for (std::int64_t h = 0; h < p.heads_q; ++h)
      for (std::int64_t i = 0; i < p.seq_q; ++i)
        for (std::int64_t d = 0; d < p.dim_v(); ++d)
          got[out_index(p, b, h, i) + d] = load_as_float(run.out_bits.data(), p.dtype, o_layout.offset(b, i, h, d));

  const ErrorStats err = compare(got, ref.out);
  const ErrorStats naive_err = compare(naive.out, ref.out);
  // Two ulps of the output dtype at the largest |output| (matters only where the naive error
  // is ~0, e.g. one key per row).
  const double epsilon = p.dtype == DType::F16 ? std::ldexp(1.0, -10) : std::ldexp(1.0, -7);
  const double floor = 2.0 * epsilon * std::exp2(std::floor(std::log2(std::max(max_abs(ref.out), 1.0 / 16))));
  const double bound = 2.0 * naive_err.max_abs + floor;
  EXPECT_EQ(err.nan_count, 0) << "NaN (poison never overwritten, or computed) in O";
  EXPECT_LE(err.max_abs, bound) << "O max abs err " << err.max_abs << " (mean " << err.mean_abs << ") at flat index "
                                << err.worst_index << "; naive " << to_string(p.dtype) << " max err "
                                << naive_err.max_abs << ", floor " << floor;

  // LSE: -inf exactly where the row sees no key, else within the same kind of bound.
  std::vector<double> lse_got(run.lse.begin(), run.lse.end());
  std::int64_t inf_mismatch = 0;
  for (std::size_t i = 0; i < ref.lse.size(); ++i) {
    const bool ref_empty = std::isinf(ref.lse[i]);
    const bool got_empty = std::isinf(lse_got[i]) && lse_got[i] < 0;
    if (ref_empty != got_empty) ++inf_mismatch;
    if (ref_empty && got_empty) lse_got[i] = ref.lse[i];
  }
  std::vector<double> naive_lse = naive.lse;
  for (std::size_t i = 0; i < ref.lse.size(); ++i)
    if (std::isinf(ref.lse[i])) naive_lse[i] = ref.lse[i];
  EXPECT_EQ(inf_mismatch, 0) << "rows whose LSE is -inf in one of reference and backend only";
  std::vector<double> finite_ref = ref.lse, finite_got = lse_got, finite_naive = naive_lse;
  for (std::size_t i = 0; i < ref.lse.size(); ++i)
    if (std::isinf(ref.lse[i])) finite_ref[i] = finite_got[i] = finite_naive[i] = 0.0;
  const ErrorStats lse_err = compare(finite_got, finite_ref);
  const ErrorStats naive_lse_err = compare(finite_naive, finite_ref);
  const double lse_bound = 2.0 * naive_lse_err.max_abs + 1e-4 * std::max(1.0, max_abs(finite_ref));
  EXPECT_EQ(lse_err.nan_count, 0) << "NaN in LSE";
  EXPECT_LE(lse_err.max_abs, lse_bound) << "LSE max abs err " << lse_err.max_abs << " at row " << lse_err.worst_index
                                        << "; naive " << naive_lse_err.max_abs;
  std::printf("  %-13s %-58s O max err %.3g (naive %.3g, bound %.3g)  LSE max err %.3g\n", backend_name.c_str(),
              p.describe().c_str(), err.max_abs, naive_err.max_abs, bound, lse_err.max_abs);
  return run.kernel_config;
}

// The same values in a layout whose every stride is larger than dense: the layout's dense
// strides of shape (b, s, h, d + pad). The padding holds NaN, so reading it shows in O.
inline HostTensor padded_copy(const HostTensor& t, Layout layout, std::int64_t pad) {
  HostTensor padded({t.shape[0], t.shape[1], t.shape[2], t.shape[3] + pad}, layout);
  padded.shape = t.shape;
  std::fill(padded.bits.begin(), padded.bits.end(), std::uint16_t{0x7FFF});  // NaN in fp16 and bf16
  for (std::int64_t b = 0; b < t.shape[0]; ++b)
    for (std::int64_t s = 0; s < t.shape[1]; ++s)
      for (std::int64_t h = 0; h < t.shape[2]; ++h)
        for (std::int64_t d = 0; d < t.shape[3]; ++d)
          padded.bits[padded.offset(b, s, h, d)] = t.bits[t.offset(b, s, h, d)];
  return padded;
}

}  // namespace attnsuite::testing_support

#endif  // ATTNSUITE_HAVE_CUDA
