// `cpu-flash`: FlashAttention-2's forward on the CPU, tiled, threaded and vectorized. The
// kernel is forward_kernel.hpp, compiled for AVX2 (forward_avx2.cpp) and for AVX-512
// (forward_avx512.cpp); this file picks the tiles and the ISA for each call and reports both as
// the kernel config ("q192-k96/avx512"). History and measurements: docs/kernels/cpu-flash.md.
#include <fmt/format.h>

#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "attnsuite/error.hpp"
#include "attnsuite/kernel_configs.hpp"
#include "core/isa.hpp"
#include "cpu/backward.hpp"
#include "cpu/common.hpp"
#include "cpu/flash/forward.hpp"

namespace attnsuite::cpu {
namespace {

using flash::kTileConfigs;
using flash::TileConfig;

class FlashBackend final : public CpuBackend {
 public:
  FlashBackend()
      : CpuBackend("cpu-flash", "FlashAttention-style tiled CPU kernel (attnsuite)",
                   fmt::format("fp32/fp16/bf16 (e4m3 in, bf16 out: forward only), tiled online softmax, O(N) memory, "
                               "AVX-512 or AVX2+FMA (widest here: {}; ATTNSUITE_CPU_ISA=avx2 forces AVX2), threaded, "
                               "causal, window, GQA/MQA, head dim 32..256",
                               to_string(widest_cpu_isa()))) {}
  Support supports(const AttentionProblem& problem) const override {
    return supports_common(problem, /*takes_e4m3=*/true);
  }

  // The built-in choice first.
  std::vector<std::string> kernel_configs(const AttentionProblem& problem) const override {
    const TileConfig& builtin = builtin_config(problem);
    std::vector<std::string> names = {builtin.name};
    for (const TileConfig& config : kTileConfigs)
      if (&config != &builtin) names.emplace_back(config.name);
    return names;
  }
  // The cache's key names the ISA the kernels run as well: a tile size tuned for one ISA says
  // little about the other.
  KernelConfigKey kernel_config_key(const AttentionProblem& problem, const PlanOptions&) const override {
    return cpu_kernel_config_key(std::string(name()), problem);
  }

  // A tile config from kernel_configs(), optionally with the ISA as the plan reports it
  // ("q96-k96/avx2"), so that a reported config can be asked for again as it is.
  std::unique_ptr<KernelPlan> plan(const AttentionProblem& problem, const PlanOptions& options) const override {
    require_support(*this, problem);
    PlanOptions tile_options = options;
    std::optional<CpuIsa> isa;
    if (const std::size_t slash = options.kernel_config.find('/'); slash != std::string::npos) {
      const std::string isa_name = options.kernel_config.substr(slash + 1);
      isa = parse_cpu_isa(isa_name);
      if (!isa)
        throw Error(ErrorKind::Usage,
                    fmt::format("cpu-flash: kernel config '{}': ISA '{}' unknown; allowed: avx2, avx512",
                                options.kernel_config, isa_name));
      if (!cpu_supports(*isa))
        throw Error(ErrorKind::Unsupported,
                    fmt::format("cpu-flash: kernel config '{}': this CPU has no {} (it runs {})", options.kernel_config,
                                isa_name, to_string(widest_cpu_isa())));
      tile_options.kernel_config = options.kernel_config.substr(0, slash);
    }
    const TileConfig& tiles = find_config(choose_kernel_config(*this, problem, tile_options));
    const CpuIsa run_isa = isa ? *isa : selected_cpu_isa();
    return std::make_unique<FunctionPlan>(
        fmt::format("{}/{}", tiles.name, to_string(run_isa)), 0,
        [this, problem, &tiles, run_isa](const AttentionArgs& args, Stream, RunReport&) {
          check_args(name(), problem, args, /*contiguous_last_dim=*/true);
          switch (run_isa) {
            case CpuIsa::Avx512:
              flash::forward_avx512(problem, args, tiles);
              return;
            case CpuIsa::Avx2:
              flash::forward_avx2(problem, args, tiles);
              return;
          }
        },
        // FlashAttention-2's backward with its own default tiles (flash_backward_configs()).
        [problem](const BackwardArgs& args, Stream, RunReport&) { flash_backward(problem, args, cpu_threads()); });
  }

 private:
  static const TileConfig& find_config(std::string_view name) {
    for (const TileConfig& config : kTileConfigs)
      if (name == config.name) return config;
    throw Error(ErrorKind::Internal, fmt::format("cpu-flash: kernel config '{}' not in its table", name));
  }
  // Query tiles of 384 halve the K/V passes of 192 (forward.hpp has the measurements), unless a
  // mask makes their diagonal tiles wasteful or the problem would leave fewer than two work
  // items per thread.
  static const TileConfig& builtin_config(const AttentionProblem& problem) {
    const TileConfig& wide = kTileConfigs[1];
    const bool masked = problem.causal || problem.window_left >= 0 || problem.window_right >= 0;
    const std::int64_t items = static_cast<std::int64_t>(problem.batch) * problem.heads_q *
                               ((problem.seq_q + wide.query_tile - 1) / wide.query_tile);
    return !masked && items >= 2 * cpu_threads() ? wide : kTileConfigs[0];
  }
};

}  // namespace

std::unique_ptr<Backend> make_flash_backend() { return std::make_unique<FlashBackend>(); }

}  // namespace attnsuite::cpu
