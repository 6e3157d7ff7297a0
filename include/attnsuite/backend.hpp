// The one interface every attention implementation sits behind, ours and the peers'.
#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "attnsuite/problem.hpp"
#include "attnsuite/tensor.hpp"

namespace attnsuite {

class KernelConfigCache;  // attnsuite/kernel_configs.hpp
struct KernelConfigKey;

// supports(): ok, or a human-readable reason why not ("head dim 96 not supported; allowed: 64, 128").
struct Support {
  bool ok = true;
  std::string reason;
  static Support yes() { return {}; }
  static Support no(std::string why) { return {false, std::move(why)}; }
  explicit operator bool() const { return ok; }
};

struct AttentionArgs {
  // Q, K, V in the problem's dtype; e4m3 ones carry their per-tensor descale (TensorView::descale).
  TensorView q;  // (batch, seq_q, heads_q, head_dim)
  TensorView k;  // (batch, seq_kv, heads_kv, head_dim)
  TensorView v;  // (batch, seq_kv, heads_kv, head_dim_v)
  TensorView o;  // (batch, seq_q, heads_q, head_dim_v), in problem.output_dtype() (q's dtype; bf16 for e4m3)
  LseView lse;   // optional: natural-log log-sum-exp of the scaled scores, (batch, heads_q, seq_q)
  void* workspace = nullptr;  // the plan's workspace_bytes() on the backend's device
};

// The backward pass (training): dQ, dK, dV from Q, K, V, the forward's O and LSE, and dO.
// Gradients have the shapes and dtype of their inputs (dq like q, dk like k, dv like v); with
// GQA/MQA dK and dV are summed over the query heads of a group. Rows that see no key (masked
// out entirely) give zero gradients. The LSE is the natural-log one forward() writes.
struct BackwardArgs {
  TensorView q, k, v;  // as in AttentionArgs
  TensorView o;        // the forward's output
  TensorView d_o;      // dL/dO, the shape and dtype of o
  LseView lse;         // required: the forward's log-sum-exp, (batch, heads_q, seq_q)
  TensorView dq, dk, dv;
  void* workspace = nullptr;  // the plan's backward workspace bytes on the backend's device
};

// An opaque stream handle: cudaStream_t for CUDA backends, unused on the CPU.
using Stream = void*;

// What a plan is made for. Everything a case needs travels here: registry backends are never
// changed by a case.
struct PlanOptions {
  // The kernel configuration (tile sizes, schedule) to run; empty: the backend's choice — the
  // kernel-config cache's entry for this device and shape class, else its built-in rule
  // (choose_kernel_config, the one place that decides).
  std::string kernel_config;
  // Backend options by key (e.g. "sparse_config" = FILE, "block_mask" = "band:8"); a backend
  // reads the keys of its option_keys() and ignores the rest.
  std::map<std::string, std::string> options;
  // The cache choose_kernel_config reads; null: KernelConfigCache::global().
  const KernelConfigCache* kernel_cache = nullptr;
  // The CUDA device the plan runs on (-1: the current device); ignored by CPU backends.
  int cuda_device = -1;
  // The plan will run backward() too (a training pass): backends that must keep state from the
  // forward for their backward (PyTorch's autograd graph) keep it.
  bool backward = false;
  // Backward only: accumulate without atomics so that repeated runs are bitwise equal.
  bool deterministic = false;
};

// What a run did: the configuration, what a sparse kernel skipped, memory of the backend's own
// allocator, and for a peer that returns its own output (PyTorch SDPA), that output.
struct RunReport {
  std::string kernel_config;  // empty for a backend without configurations
  struct Sparse {
    double predicted_sparsity = 0;       // 1 − kept / visible key blocks
    double achieved_sparsity = 0;        // 1 − (Q·Kᵀ + P·V work done) / (2 × visible), P·V skips counted
    std::optional<double> predictor_ms;  // time of the predictor within that run
  };
  std::optional<Sparse> sparse;  // sparse backends whose run has finished when it returns (CPU)
  // A GPU sparse backend's statistics are on the device until its run has finished: this reads
  // them back. Call it after the stream has synchronized (outside a timed span), before the
  // plan's next run.
  std::function<Sparse()> read_sparse;
  // `sparse`, else `read_sparse()`; nullopt for dense backends.
  std::optional<Sparse> sparse_stats() const {
    if (sparse) return sparse;
    if (read_sparse) return read_sparse();
    return std::nullopt;
  }
  // A backend that allocates through its own allocator (PyTorch's caching allocator): that
  // allocator's peak during the run; the harness adds it to what its tracking allocator saw.
  std::size_t own_peak_memory_bytes = 0;
  // A backend whose library returns a fresh output instead of writing args.o (PyTorch SDPA):
  // the output (and LSE; for backward(), the gradients), valid while `owner` lives.
  TensorView output;
  LseView output_lse;
  TensorView output_dq, output_dk, output_dv;
  std::shared_ptr<const void> owner;
};

// An executable plan for one problem: the choices are made, the workspace is known; runs any
// number of times, on any inputs of that problem.
class KernelPlan {
 public:
  virtual ~KernelPlan() = default;
  // The configuration this plan runs ("" for a backend without configurations).
  virtual std::string_view kernel_config() const = 0;
  // Which CTA runs which work, for a backend that decides it per problem beside the kernel
  // config (flash3, flash3-fp8: "grid", "persistent", "paired", ...); "" for the others.
  virtual std::string_view work_order() const { return {}; }
  // Bytes of AttentionArgs::workspace (BackwardArgs::workspace) a run needs on the device.
  virtual std::size_t workspace_bytes() const { return 0; }
  virtual std::size_t backward_workspace_bytes() const { return 0; }
  // True for a peer that returns its own output (RunReport::output) instead of writing args.o:
  // the harness then passes empty args.o / args.lse (BackwardArgs' dq, dk, dv).
  virtual bool produces_own_output() const { return false; }
  // Writes args.o (and args.lse when given). Throws Error on failure.
  virtual RunReport forward(const AttentionArgs& args, Stream stream) = 0;
  // Writes dq, dk, dv. Only for plans made with PlanOptions::backward; others throw Error(Unsupported).
  virtual RunReport backward(const BackwardArgs& args, Stream stream);
};

class Backend {
 public:
  virtual ~Backend() = default;

  // Registry name, e.g. "cpu-flash" or "torch-flash".
  virtual std::string_view name() const = 0;
  // What it is, e.g. "FlashAttention-2 (PyTorch flash backend)". Peers keep their own names.
  virtual std::string_view display_name() const = 0;
  // Empty for attnsuite's own backends; the project it comes from for a peer ("PyTorch", "cuDNN").
  virtual std::string_view peer_of() const { return {}; }
  virtual Device device() const = 0;
  // One line on what it supports, shown by `attnsuite list`.
  virtual std::string capabilities() const = 0;

  // Whether it can run the forward of `problem` here, else why not; plan() refuses the same.
  virtual Support supports(const AttentionProblem& problem) const = 0;
  // Whether it has a backward for `problem` (on top of supports()), else why not.
  virtual Support supports_backward(const AttentionProblem&) const;
  // Empty, or how its backward stands when that is not a plain yes or no (an experimental one
  // that plans refuse unless a backend option opts in): `attnsuite list` shows it in place of
  // yes/no, e.g. "experimental: opt-in while slower than FlashAttention-2's".
  virtual std::string_view backward_status() const { return {}; }

  // The kernel configurations it can run `problem` with, its built-in choice first; empty when
  // it has nothing to choose from.
  virtual std::vector<std::string> kernel_configs(const AttentionProblem&) const { return {}; }
  // The kernel-config cache's key for `problem` on the device a plan would run on (the GPU's
  // name and driver, or the CPU model). The default names this machine's CPU.
  virtual KernelConfigKey kernel_config_key(const AttentionProblem& problem, const PlanOptions& options) const;
  // The PlanOptions::options keys it reads ("sparse_config", ...).
  virtual std::vector<std::string> option_keys() const { return {}; }
  // Throws Error(Usage) naming the value and what is allowed for a bad value of a key it reads,
  // so that a sweep refuses it before any case runs; plan() refuses the same.
  virtual void check_options(const std::map<std::string, std::string>& /*options*/) const {}

  // A plan for `problem`. Throws Error(Unsupported) with the reason when it cannot run it (as
  // supports()), Error(Usage) for an unknown kernel config or a bad option value.
  virtual std::unique_ptr<KernelPlan> plan(const AttentionProblem& problem, const PlanOptions& options) const = 0;

  // plan(problem, options)->forward(args, stream): one call, for callers that run a problem once.
  RunReport forward(const AttentionProblem& problem, const AttentionArgs& args, Stream stream,
                    const PlanOptions& options = {}) const;
};

// What a backend says about itself (`attnsuite list`, result rows), fixed when it is made.
struct BackendIdentity {
  std::string name;
  std::string display_name;
  Device device;
  std::string capabilities;
  std::string peer_of = {};
};

// A backend whose identity is fixed when it is made, as most are: one BackendIdentity answers
// name(), display_name(), device(), capabilities() and peer_of().
class IdentifiedBackend : public Backend {
 public:
  explicit IdentifiedBackend(BackendIdentity identity) : identity_(std::move(identity)) {}
  std::string_view name() const final { return identity_.name; }
  std::string_view display_name() const final { return identity_.display_name; }
  std::string_view peer_of() const final { return identity_.peer_of; }
  Device device() const final { return identity_.device; }
  std::string capabilities() const final { return identity_.capabilities; }

 private:
  BackendIdentity identity_;
};

// The kernel configuration a plan of `backend` runs: options.kernel_config when set (Error(Usage)
// naming the allowed ones when `problem` has no such config), else the kernel-config cache's
// entry when it names a config `problem` has, else the built-in choice (kernel_configs' first);
// "" for a backend without configurations.
std::string choose_kernel_config(const Backend& backend, const AttentionProblem& problem, const PlanOptions& options);

// Throws Error(Unsupported, "<name>: <reason>") unless backend.supports(problem).
void require_support(const Backend& backend, const AttentionProblem& problem);

// A plan made of functions: what most backends need, their choices captured by value.
class FunctionPlan final : public KernelPlan {
 public:
  using Forward = std::function<void(const AttentionArgs&, Stream, RunReport&)>;
  using Backward = std::function<void(const BackwardArgs&, Stream, RunReport&)>;
  FunctionPlan(std::string kernel_config, std::size_t workspace, Forward forward, Backward backward = {},
               std::size_t backward_workspace = 0)
      : kernel_config_(std::move(kernel_config)),
        workspace_(workspace),
        backward_workspace_(backward_workspace),
        forward_(std::move(forward)),
        backward_(std::move(backward)) {}
  std::string_view kernel_config() const override { return kernel_config_; }
  std::string_view work_order() const override { return work_order_; }
  void set_work_order(std::string order) { work_order_ = std::move(order); }
  std::size_t workspace_bytes() const override { return workspace_; }
  std::size_t backward_workspace_bytes() const override { return backward_workspace_; }
  RunReport forward(const AttentionArgs& args, Stream stream) override;
  RunReport backward(const BackwardArgs& args, Stream stream) override;

 private:
  std::string kernel_config_, work_order_;
  std::size_t workspace_ = 0, backward_workspace_ = 0;
  Forward forward_;
  Backward backward_;
};

}  // namespace attnsuite
