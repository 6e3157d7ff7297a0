// Runs one case: support check, inputs, accuracy run against the fp64 reference, timing.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "attnsuite/device_context.hpp"
#include "attnsuite/registry.hpp"
#include "bench/plan.hpp"
#include "bench/result.hpp"

namespace attnsuite::bench {

// Accuracy of an output against the reference over the compared elements.
struct AccuracyStats {
  double max_abs_err = 0, rel_l2 = 0, rel_l1 = 0, cos_sim = 0, rmse = 0;
  std::int64_t compared = 0;
  std::int64_t non_finite = 0;  // NaN or Inf in the output: never passes
};

// Accumulates the statistics over pairs (output, reference); merge for parallel sums.
class AccuracyAccumulator {
 public:
  void add(double out, double ref);
  AccuracyStats finish() const;

 private:
  double max_abs_ = 0, sum_sq_diff_ = 0, sum_sq_ref_ = 0, sum_sq_out_ = 0, sum_abs_diff_ = 0, sum_abs_ref_ = 0,
         sum_dot_ = 0;
  std::int64_t count_ = 0, non_finite_ = 0;
};

// The row fields that identify a case (no results yet).
ResultRow row_for_case(const Case& c, const Backend* backend);

// Throws Error(Usage) for a key of spec.backend_options that none of the spec's backends takes
// (Backend::option_keys), or a bad value of one (Backend::check_options).
void check_backend_options(const SweepSpec& spec, Registry& registry);

// The entries of `options` whose keys `backend` takes.
std::map<std::string, std::string> options_taken_by(const Backend& backend,
                                                    const std::map<std::string, std::string>& options);

class Runner {
 public:
  Runner(SweepSpec spec, Registry& registry);
  ~Runner();

  // Runs one case and returns its row: ok, skipped (unsupported, with the reason) or failed
  // (with the error). Returns nullopt when `cancelled` became true mid-case: the case did not
  // finish and must not be recorded.
  std::optional<ResultRow> run(const Case& c, const std::function<bool()>& cancelled = {});

  // The context the runner measures a device with (made on first use), for callers that check
  // the device between cases: a tuner asserting that memory went back to its baseline.
  DeviceContext& context_for(Device device);

  // Multi-GPU sweeps (bench --gpus): this runner measures the CUDA backends on device `index`
  // instead of the device they name (cuda:0), and makes that device current on the calling
  // thread. The backends run on the current device, so each worker thread needs its own runner
  // and its own backend instances.
  void use_cuda_device(int index);

  // The options a plan of case `c` is made with: its kernel config, the backend options its
  // backend takes, the CUDA device this runner measures.
  PlanOptions plan_options(const Case& c, const Backend& backend) const;

 private:
  Device device_of(const Backend& backend) const;
  struct Prepared;
  const Prepared& prepare(const Case& c);
  // The device buffers of one case: inputs, output, LSE, workspace, and the args that view them.
  struct DeviceInputs {
    std::unique_ptr<DeviceAllocation> q, k, v, o, lse, workspace;
    std::unique_ptr<DeviceAllocation> d_o, dq, dk, dv, backward_workspace;
    AttentionArgs args;
    BackwardArgs backward;
  };
  void check_fits(const Case& c, const Backend& backend, const KernelPlan& plan, DeviceContext& ctx);
  DeviceInputs upload(DeviceContext& ctx, const Prepared& in, const Case& c);
  void prepare_outputs(DeviceContext& ctx, const KernelPlan& plan, const AttentionProblem& p, DeviceInputs& inputs);
  bool check_accuracy(DeviceContext& ctx, KernelPlan& plan, const Prepared& in, DeviceInputs& inputs, ResultRow& row);
  void prepare_gradients(Prepared& in, const Case& c);
  bool check_gradients(DeviceContext& ctx, KernelPlan& plan, const Prepared& in, DeviceInputs& inputs, Pass pass,
                       ResultRow& row);
  bool time_case(DeviceContext& ctx, KernelPlan& plan, const AttentionProblem& p, DeviceInputs& inputs, Pass pass,
                 const std::function<bool()>& cancelled, ResultRow& row);

  SweepSpec spec_;
  Registry& registry_;
  std::map<std::pair<int, int>, std::unique_ptr<DeviceContext>> contexts_;
  std::unique_ptr<Prepared> prepared_;  // inputs and reference of the current shape
  int cuda_device_ = -1;                // >= 0: use_cuda_device()
};

}  // namespace attnsuite::bench
