// `sage` and `sage2`: attnsuite's SageAttention-class quantized kernels, as Backends. Host side
// only: supports(), the workspace, and the launches of one forward — statistics of K (and V),
// INT8 Q (and smooth-K's LSE shift), smoothed INT8 K, (FP8 Vᵀ), attention — all on the caller's
// stream and all part of the forward, so the harness's latency includes the quantization.
//
// Two attention kernels read the same quantized buffers, exposed as kernel configs
// (Backend::kernel_configs): "mma" (kernel.cuh, mma.sync, sm80+ / sm89+ for sage2) and the
// sm_90a wgmma kernel (wgmma_kernel.cuh, built with ATTNSUITE_FLASH3) in three schedules,
// "wgmma" (flash3 v2's: the two consumer warpgroups ping-pong at the tensor cores, and each
// overlaps its softmax of tile j with its P·V of tile j − 1), "wgmma-pingpong" (ping-pong only)
// and "wgmma-serial" (flash3 v1's unsynchronized consumers). The default is the wgmma kernel
// wherever it can run (a compute capability 9.0 GPU, and for sage a V that TMA can read) — sage
// "wgmma", sage2 "wgmma-pingpong" (default_wgmma_config) — else "mma".
#include "cuda/sage/sage.hpp"

#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <numbers>
#include <string>
#include <string_view>
#include <vector>

#include "attnsuite/error.hpp"
#include "cuda/common/attention_params.hpp"
#include "cuda/common/backend_support.hpp"
#include "cuda/common/check.hpp"
#include "cuda/common/device_buffer.hpp"
#include "cuda/cuda_backends.hpp"
#include "cuda/sage/launch.hpp"
#include "cuda/sage/quant_rule.hpp"
#if ATTNSUITE_HAVE_FLASH3
#include "cuda/sage/wgmma_launch.hpp"
#endif

namespace attnsuite::cuda {
namespace {

using sage::Mode;

constexpr std::string_view kMmaConfig = "mma";
// The wgmma kernel's kernel configs and the schedule each runs (params.hpp), the default first.
// fma_exp2_every > 0: that share of the softmax's exponentials on the FMA pipe instead of MUFU
// (sage2 only; hopper::softmax_exp2).
struct WgmmaConfig {
  std::string_view name;
  sage::Schedule schedule;
  int fma_exp2_every = 0;
};
// "wgmma-pingpong-fmaexp" (sage2; opt-in, never the default): the
// ping-pong kernel with every 8th 8-key group's exponentials on FMA. At 8 bits the tile's GEMMs
// (INT8 Q·Kᵀ, FP8 P·V: 4·64·128·128 operations per consumer at d128, ~8192 a cycle per SM) take
// about as long as its 8192 exponentials on MUFU (16 a cycle), so MUFU sets the pace — the
// prediction; measured (H100, 2026-12-06, tune --kernels, B4 N4096 dense bf16): 0.97x ping-pong at
// d64 (1.614 vs 1.563 ms), 0.97x at d128 (1.010 vs 0.984 ms). Its GPU tests have not run yet.
constexpr WgmmaConfig kWgmmaConfigs[] = {{"wgmma", sage::Schedule::Overlap},
                                         {"wgmma-pingpong", sage::Schedule::PingPong},
                                         {"wgmma-serial", sage::Schedule::Serial},
                                         {"wgmma-pingpong-fmaexp", sage::Schedule::PingPong, 8}};
// The default wgmma schedule per mode. sage: overlap. sage2: ping-pong since v6 — `tune
// --kernels` on the H200 (2026-12-04, sixth session; d64 and d128, N 4k and 16k, causal and
// not) found it 7–12% faster than overlap in all 8 cases (d128 N16k: 3.06 vs 3.42 ms), where v3
// had found overlap best; v6's overlap build spills 212 bytes (ptxas), ping-pong holds one tile
// of registers fewer. sparge-sage's block-sparse forwards keep "wgmma" (not re-tuned).
constexpr std::string_view kWgmmaConfig = kWgmmaConfigs[0].name;
constexpr std::string_view default_wgmma_config(Mode mode) {
  return mode == Mode::Sage2 ? kWgmmaConfigs[1].name : kWgmmaConfigs[0].name;
}

const WgmmaConfig* wgmma_config(std::string_view name) {
  for (const WgmmaConfig& config : kWgmmaConfigs)
    if (config.name == name) return &config;
  return nullptr;
}

// Whether this build has the wgmma kernels and the current GPU runs sm_90a code (exactly
// compute capability 9.0: "a" features do not carry over to later architectures).
bool wgmma_runs_here() {
#if ATTNSUITE_HAVE_FLASH3
  return current_compute_capability() == 90;
#else
  return false;
#endif
}

bool rows_aligned(const TensorView& view) {
  constexpr std::int64_t kElementsPer16Bytes = 8;
  return reinterpret_cast<std::uintptr_t>(view.data) % 16 == 0 && view.strides[0] % kElementsPer16Bytes == 0 &&
         view.strides[1] % kElementsPer16Bytes == 0 && view.strides[2] % kElementsPer16Bytes == 0;
}

BackendIdentity identity(Mode mode) {
  if (mode == Mode::Sage) {
    return {
        "sage",
        "sage (attnsuite INT8 QK, fp16/bf16 PV)",
        {DeviceType::Cuda, 0},
        "fp16/bf16, head dim 64/128, causal, sliding window, GQA/MQA, seq_q != seq_kv, BSHD/BHSD, LSE; "
        "INT8 Q·Kᵀ (smoothed K), 16-bit P·V; sm80+ (mma.sync), sm_90a wgmma kernel config; "
        "quantization included in forward; option quant_qk=fused (opt-in: 1.00-1.01x the separate passes on the H100)"};
  }
  return {"sage2",
          "sage2 (attnsuite INT8 QK, FP8 PV)",
          {DeviceType::Cuda, 0},
          "fp16/bf16, head dim 64/128, causal, sliding window, GQA/MQA, seq_q != seq_kv, BSHD/BHSD, LSE; "
          "INT8 Q·Kᵀ (smoothed K), FP8 e4m3 P·V; sm89+ (mma.sync e4m3), sm_90a wgmma kernel config; "
          "quantization included in forward, option quant_qk=fused (opt-in: 1.00-1.01x the separate passes on the "
          "H100); kernel config wgmma-pingpong-fmaexp opt-in (0.97x wgmma-pingpong on the H100)"};
}

class SageBackend final : public IdentifiedBackend {
 public:
  explicit SageBackend(Mode mode) : IdentifiedBackend(identity(mode)), mode_(mode) {}

  Support supports(const AttentionProblem& problem) const override {
    Support support = supports_problem_common(name(), problem);
    if (!support) return support;
    support = supports_shape(name(), problem, sage::kSupportedHeadDims);
    if (!support) return support;
    support = supports_device(name());
    if (!support || mode_ == Mode::Sage) return support;
    // FP8 MMA: the GPU must be sm_89+ and this build must run sm_89+ code on it (its sm_80 pass
    // has the FP8 MMAs compiled as traps; an sm_89 GPU would run that pass).
    const std::optional<int> capability = current_compute_capability();
    if (!capability) return Support::no("no CUDA device available: could not query the current device");
    if (*capability < 89) {
      return Support::no(
          fmt::format("compute capability {}.{} not supported by sage2; its FP8 e4m3 MMA needs 8.9 "
                      "or newer (sage runs here)",
                      *capability / 10, *capability % 10));
    }
    const int arch = sage::binary_arch_on_current_device();
    if (arch < 89) {
      return Support::no(
          fmt::format("sage2: this build runs sm_{} code on this GPU, which has no FP8 MMA; build "
                      "with CMAKE_CUDA_ARCHITECTURES including 89 or 90a",
                      arch));
    }
    return Support::yes();
  }

  // The default first (what `tune --kernels` compares the others against): where the wgmma
  // kernel runs, its default schedule, the other two, then "mma".
  std::vector<std::string> kernel_configs(const AttentionProblem&) const override {
    std::vector<std::string> configs;
    if (wgmma_runs_here()) {
      configs.emplace_back(default_wgmma_config(mode_));
      for (const WgmmaConfig& config : kWgmmaConfigs)
        if (config.name != default_wgmma_config(mode_) && (config.fma_exp2_every == 0 || mode_ == Mode::Sage2))
          configs.emplace_back(config.name);
    }
    configs.emplace_back(kMmaConfig);
    return configs;
  }
  KernelConfigKey kernel_config_key(const AttentionProblem& problem, const PlanOptions& options) const override {
    return cuda::kernel_config_key(plan_device(options), std::string(name()), problem);
  }

  // The chosen config (choose_kernel_config) runs, except that a wgmma config the operands of a
  // run do not allow (sage: a V that TMA cannot read) falls back to "mma" — unless it was given
  // in PlanOptions::kernel_config: then the run throws Error(Unsupported). RunReport::kernel_config
  // says which ran.
  // quant_qk: "separate" (absent: separate) or "fused" (Q's and K's quantization passes in one
  // launch: quant.cu, quantize_q_and_k_kernel; correct on the H100 and 1.00-1.01x the separate
  // passes at d128 N 4096, within the noise: opt-in).
  std::vector<std::string> option_keys() const override { return {std::string(kQuantQk)}; }
  void check_options(const std::map<std::string, std::string>& options) const override {
    (void)fused_qk_quantization(options);
  }

  std::unique_ptr<KernelPlan> plan(const AttentionProblem& problem, const PlanOptions& options) const override {
    const bool fused_qk = fused_qk_quantization(options.options);
    require_support(*this, problem);
    std::string config = choose_kernel_config(*this, problem, options);
    const bool given = !options.kernel_config.empty();
    // Without the harness's workspace (tests, the Python module) a run uses a buffer of the
    // plan's own, made on its first such run and kept.
    auto own_workspace = std::make_shared<DeviceBuffer>();
    return std::make_unique<FunctionPlan>(
        config, layout_of(problem).bytes,
        [this, problem, config, given, own_workspace, fused_qk](const AttentionArgs& args, Stream stream,
                                                                RunReport& report) {
          report.kernel_config =
              std::string(run(problem, args, stream, config, given, nullptr, own_workspace.get(), fused_qk));
        });
  }

  std::size_t workspace_bytes(const AttentionProblem& problem) const { return layout_of(problem).bytes; }

  // Why the wgmma kernel (the only one that reads a block list) cannot run on this GPU and
  // build, or "" when it can.
  std::string wgmma_device_problem() const {
#if ATTNSUITE_HAVE_FLASH3
    if (!wgmma_runs_here()) return "it needs a compute capability 9.0 GPU (sm_90a code)";
    return {};
#else
    return "this build has no wgmma kernels (ATTNSUITE_FLASH3=OFF)";
#endif
  }

  // One forward: the quantization passes, then the attention kernel of `config` (a block list:
  // the wgmma kernel over the listed tiles). `given`: the config was asked for, so a wgmma config
  // that cannot run is an error rather than "mma". `own_workspace`: where a run without
  // args.workspace gets one (null: args.workspace is required). `fused_qk`: Q's and K's
  // quantization passes in one launch (quant_qk=fused). Returns the config that ran.
  std::string_view run(const AttentionProblem& problem, const AttentionArgs& args, Stream stream,
                       const std::string& config, bool given, const sage::BlockList* block_list,
                       DeviceBuffer* own_workspace, bool fused_qk = false) const {
    check_cuda_args(name(), problem, args);
    for (const TensorView* view : {&args.q, &args.k, &args.v, &args.o}) {
      if (!rows_aligned(*view)) {
        throw Error(ErrorKind::Unsupported,
                    fmt::format("{}: every row of Q, K, V and O must start 16-byte aligned (base pointer, and "
                                "batch/seq/head strides multiples of 8 elements)",
                                name()));
      }
    }
    const sage::WorkspaceLayout layout = layout_of(problem);
    auto* workspace = static_cast<unsigned char*>(args.workspace);
    if (workspace == nullptr) {
      if (own_workspace == nullptr)
        throw Error(ErrorKind::Usage, fmt::format("{}: needs a workspace of {} bytes, got none", name(), layout.bytes));
      // Replaced only after the stream is done with the old one.
      if (own_workspace->bytes() < layout.bytes) {
        ATTNSUITE_CUDA_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)));
        *own_workspace = DeviceBuffer();
        *own_workspace = DeviceBuffer(layout.bytes);
      }
      workspace = own_workspace->as<unsigned char>();
    }
    const int d = problem.head_dim;

    sage::StatsParams stats;
    stats.k = args.k.data;
    stats.k_batch_stride = args.k.strides[0];
    stats.k_row_stride = args.k.strides[1];
    stats.k_head_stride = args.k.strides[2];
    if (mode_ == Mode::Sage2) {
      stats.v = args.v.data;
      stats.v_batch_stride = args.v.strides[0];
      stats.v_row_stride = args.v.strides[1];
      stats.v_head_stride = args.v.strides[2];
      stats.v_amax = reinterpret_cast<std::uint32_t*>(workspace + layout.v_amax);
    }
    stats.batch = problem.batch;
    stats.heads = problem.heads_kv;
    stats.seq = problem.seq_kv;
    stats.head_dim = d;
    stats.splits = layout.splits;
    stats.k_sum = reinterpret_cast<float*>(workspace + layout.k_sum);
    sage::launch_stats(stats, problem.dtype, stream);

    // One quantization pass over a (batch, seq, heads, d) view into the workspace.
    const auto rows_of = [&](const TensorView& view, int heads, int seq, std::size_t out, std::size_t scale) {
      sage::QuantParams rows;
      rows.x = view.data;
      rows.batch_stride = view.strides[0];
      rows.row_stride = view.strides[1];
      rows.head_stride = view.strides[2];
      rows.batch = problem.batch;
      rows.heads = heads;
      rows.seq = seq;
      rows.head_dim = d;
      rows.out = reinterpret_cast<std::int8_t*>(workspace + out);
      rows.scale = reinterpret_cast<float*>(workspace + scale);
      return rows;
    };
    const float scale_log2 = problem.softmax_scale() * std::numbers::log2e_v<float>;
    sage::QuantParams q = rows_of(args.q, problem.heads_q, problem.seq_q, layout.q8, layout.q_scale);
    q.block_rows = sage::q_block_rows(mode_);
    q.blocks = layout.q_blocks;
    q.scale_multiplier = scale_log2;
    if (args.lse.data != nullptr) {
      // Smooth-K moves each row's scores by −scale·(q·k̄): O does not see it, the LSE does; the
      // Q pass computes it and the attention kernel adds it to the LSE.
      q.lse_shift = reinterpret_cast<float*>(workspace + layout.lse_shift);
      q.k_sum = stats.k_sum;
      q.splits = layout.splits;
      q.group_size = problem.group_size();
      q.seq_kv = problem.seq_kv;
      q.shift_scale = problem.softmax_scale();
    }

    sage::QuantParams k = rows_of(args.k, problem.heads_kv, problem.seq_kv, layout.k8, layout.k_scale);
    k.block_rows = sage::k_block_rows(mode_, d);
    k.key_groups = sage::k_key_groups(mode_);
    k.blocks = layout.k_blocks;
    k.mean_partials = stats.k_sum;
    k.splits = layout.splits;
    if (fused_qk) {
      sage::launch_quantize_q_and_k(q, k, problem.dtype, stream);
    } else {
      sage::launch_quantize_rows(q, problem.dtype, stream);
      sage::launch_quantize_rows(k, problem.dtype, stream);
    }

    sage::Params params;
    if (mode_ == Mode::Sage2) {
      sage::VQuantParams v;
      copy_view(args.v, v.v, v.batch_stride, v.row_stride, v.head_stride);
      v.batch = problem.batch;
      v.heads = problem.heads_kv;
      v.seq = problem.seq_kv;
      v.head_dim = d;
      v.splits = layout.splits;
      v.v_amax = stats.v_amax;
      v.vt = workspace + layout.vt8;
      v.padded_keys = layout.v_keys;
      v.v_scale = reinterpret_cast<float*>(workspace + layout.v_scale);
      sage::launch_quantize_v(v, problem.dtype, stream);
      params.vt8 = v.vt;
      params.v_scale = v.v_scale;
      params.v_keys = layout.v_keys;
    } else {
      copy_view(args.v, params.v, params.v_batch_stride, params.v_row_stride, params.v_head_stride);
    }
    params.q8 = q.out;
    params.k8 = k.out;
    params.q_scale = q.scale;
    params.k_scale = k.scale;
    params.q_blocks = layout.q_blocks;
    params.k_blocks = layout.k_blocks;
    copy_view(args.o, params.o, params.o_batch_stride, params.o_row_stride, params.o_head_stride);
    params.lse = args.lse.data;
    params.lse_shift = q.lse_shift;
    fill_sizes(params, problem);
    fill_window(params, problem);
    std::string_view ran;
    if (block_list != nullptr) {
      // sparge-sage: only the wgmma kernel reads a block list.
      const std::string why_not = wgmma_problem(params);
      if (!why_not.empty())
        throw Error(ErrorKind::Unsupported,
                    fmt::format("sparge-sage: the block-sparse sage2 kernel cannot run: {}", why_not));
      params.block_index = block_list->index;
      params.block_count = block_list->count;
      params.m_blocks = block_list->m_blocks;
      params.n_blocks = block_list->n_blocks;
      ran = kWgmmaConfig;
    } else {
      ran = runnable(config, given, params);
    }
    if (ran == kMmaConfig) {
      sage::launch_forward(mode_, params, problem.dtype, stream);
    } else {
#if ATTNSUITE_HAVE_FLASH3
      const WgmmaConfig& wgmma = *wgmma_config(ran);
      sage::launch_forward_wgmma(mode_, params, problem.dtype, wgmma.schedule, wgmma.fma_exp2_every, stream);
#endif
    }
    return ran;
  }

 private:
  static constexpr std::string_view kQuantQk = "quant_qk";

  // The quant_qk option: "separate" (absent: separate) or "fused"; another value is refused.
  bool fused_qk_quantization(const std::map<std::string, std::string>& options) const {
    static constexpr std::string_view kAllowed[] = {"separate", "fused"};
    return cuda::option_choice(name(), options, kQuantQk, kAllowed) == 1;
  }

  // Why the wgmma kernel cannot run this forward here, or "" when it can.
  std::string wgmma_problem([[maybe_unused]] const sage::Params& params) const {
    std::string why_not = wgmma_device_problem();
#if ATTNSUITE_HAVE_FLASH3
    if (why_not.empty()) why_not = sage::wgmma_layout_problem(mode_, params);
#endif
    return why_not;
  }

  // What runs for the chosen `config` on these operands: "mma" as chosen; a wgmma config where
  // the wgmma kernel can read them, else "mma" — or, when the config was given, Error(Unsupported).
  std::string_view runnable(const std::string& config, bool given, const sage::Params& params) const {
    if (config == kMmaConfig) return kMmaConfig;
    const WgmmaConfig* wgmma = wgmma_config(config);
    ATTNSUITE_CHECK(wgmma != nullptr, ErrorKind::Internal,
                    fmt::format("{}: kernel config '{}' unknown", name(), config));
    const std::string why_not = wgmma_problem(params);
    if (why_not.empty()) return wgmma->name;
    if (given)
      throw Error(ErrorKind::Unsupported,
                  fmt::format("{}: kernel config '{}' cannot run: {}", name(), config, why_not));
    return kMmaConfig;
  }

  sage::WorkspaceLayout layout_of(const AttentionProblem& problem) const {
    return sage::workspace_layout(mode_, problem.batch, problem.heads_q, problem.heads_kv, problem.seq_q,
                                  problem.seq_kv, problem.head_dim);
  }

  Mode mode_;
};

class Sage2BlockSparseImpl final : public sage::Sage2BlockSparse {
 public:
  Support supports(const AttentionProblem& problem) const override {
    Support support = backend_.supports(problem);
    if (!support) return support;
    const std::string why_not = backend_.wgmma_device_problem();
    return why_not.empty() ? Support::yes() : Support::no(fmt::format("sparge-sage: {}", why_not));
  }
  std::size_t workspace_bytes(const AttentionProblem& problem) const override {
    return backend_.workspace_bytes(problem);
  }
  void forward(const AttentionProblem& problem, const AttentionArgs& args, const sage::BlockList& list,
               Stream stream) const override {
    (void)backend_.run(problem, args, stream, std::string(kWgmmaConfig), /*given=*/true, &list, nullptr);
  }

 private:
  SageBackend backend_{Mode::Sage2};
};

}  // namespace

std::unique_ptr<sage::Sage2BlockSparse> sage::make_sage2_block_sparse() {
  return std::make_unique<Sage2BlockSparseImpl>();
}

std::unique_ptr<Backend> make_sage_backend() { return std::make_unique<SageBackend>(Mode::Sage); }
std::unique_ptr<Backend> make_sage2_backend() { return std::make_unique<SageBackend>(Mode::Sage2); }

}  // namespace attnsuite::cuda
