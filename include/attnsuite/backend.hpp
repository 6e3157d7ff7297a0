// The one interface every attention implementation sits behind, ours and the peers'.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "attnsuite/problem.hpp"
#include "attnsuite/tensor.hpp"

namespace attnsuite {

// supports(): ok, or a human-readable reason why not ("head dim 96 not supported; allowed: 64, 128").
struct Support {
  bool ok = true;
  std::string reason;
  static Support yes() { return {}; }
  static Support no(std::string why) { return {false, std::move(why)}; }
  explicit operator bool() const { return ok; }
};

struct AttentionArgs {
  TensorView q;  // (batch, seq_q, heads_q, head_dim)
  TensorView k;  // (batch, seq_kv, heads_kv, head_dim)
  TensorView v;  // (batch, seq_kv, heads_kv, head_dim_v)
  TensorView o;  // (batch, seq_q, heads_q, head_dim_v), same dtype as q
  LseView lse;   // optional: natural-log log-sum-exp of the scaled scores, (batch, heads_q, seq_q)
  void* workspace = nullptr;  // workspace_bytes(problem) bytes on the backend's device
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

  virtual Support supports(const AttentionProblem& problem) const = 0;
  virtual std::size_t workspace_bytes(const AttentionProblem&) const { return 0; }
  // Writes args.o (and args.lse when given). Throws Error on failure.
  virtual void forward(const AttentionProblem& problem, const AttentionArgs& args, Stream stream) = 0;

  // --- For peers whose API does not fit the calls above (PyTorch SDPA) -------------------------
  // A backend whose library returns a fresh output (and allocates it) instead of writing into
  // ours: the harness then passes empty args.o / args.lse and, after forward(), reads the
  // output from produced_output() / produced_lse(), valid until the next forward().
  virtual bool produces_own_output() const { return false; }
  virtual TensorView produced_output() const { return {}; }
  virtual LseView produced_lse() const { return {}; }
  // A backend that allocates through its own allocator (PyTorch's caching allocator) reports
  // that allocator's peak here; the harness adds it to what its tracking allocator saw.
  virtual void reset_own_peak_memory() {}
  virtual std::size_t own_peak_memory_bytes() const { return 0; }

  // --- Kernel configurations (tile sizes, stages) for `attnsuite tune --kernels` ---------------
  // The configurations this backend can run `problem` with, its built-in default first; empty
  // when it has nothing to choose from. Without a forced one, forward() takes the entry of the
  // kernel-config cache for this device and the problem's shape class (attnsuite/kernel_configs.hpp),
  // else the default.
  virtual std::vector<std::string> kernel_configs(const AttentionProblem&) const { return {}; }
  // Forces a configuration for the following forward() calls; "" returns to the backend's own
  // choice. Throws Error(Usage) naming the allowed ones for an unknown name.
  virtual void force_kernel_config(std::string_view) {}
  // The configuration the last forward() ran with; empty for a backend without configurations.
  virtual std::string last_kernel_config() const { return {}; }

  // --- Options and sparse kernels --------------------------------------------------------------
  // A named option from the suite or the CLI (e.g. "sparse_config" = a file). Returns false for
  // a key this backend does not take; throws Error(Usage) for a bad value of one it takes.
  virtual bool set_option(std::string_view /*key*/, const std::string& /*value*/) { return false; }
  // Back to the defaults, before a sweep applies its own options.
  virtual void reset_options() {}
  // What the last forward() of a sparse backend skipped; nullopt for dense backends.
  struct SparseReport {
    double predicted_sparsity = 0;  // 1 − kept / visible key blocks
    double achieved_sparsity = 0;   // 1 − (Q·Kᵀ + P·V work done) / (2 × visible), P·V skips counted
    std::optional<double> predictor_ms;  // time of the predictor within that forward
  };
  virtual std::optional<SparseReport> last_sparse_report() const { return std::nullopt; }
};

}  // namespace attnsuite
