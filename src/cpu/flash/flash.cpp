// `cpu-flash`: FlashAttention-2's forward on the CPU, tiled, threaded and vectorized. The
// kernel is forward_kernel.hpp, compiled for AVX2 (forward_avx2.cpp) and for AVX-512
// (forward_avx512.cpp); this file picks the tiles and the ISA for each call and reports both as
// the kernel config ("q192-k96/avx512"). History and measurements: docs/kernels/cpu-flash.md.
#include <fmt/format.h>

#include <optional>
#include <string>
#include <string_view>

#include "attnsuite/error.hpp"
#include "attnsuite/kernel_configs.hpp"
#include "cpu/common.hpp"
#include "cpu/flash/forward.hpp"
#include "cpu/isa.hpp"

namespace attnsuite::cpu {
namespace {

using flash::kTileConfigs;
using flash::TileConfig;

class FlashBackend final : public Backend {
 public:
  std::string_view name() const override { return "cpu-flash"; }
  std::string_view display_name() const override {
    return "FlashAttention-style tiled CPU kernel (attnsuite)";
  }
  Device device() const override { return {DeviceType::Cpu, 0}; }
  std::string capabilities() const override {
    return fmt::format("fp32/fp16/bf16, tiled online softmax, O(N) memory, AVX-512 or AVX2+FMA (widest here: {}; "
                       "ATTNSUITE_CPU_ISA=avx2 forces AVX2), threaded, causal, window, GQA/MQA, head dim 32..256",
                       to_string(widest_cpu_isa()));
  }
  Support supports(const AttentionProblem& problem) const override {
    return supports_common(problem);
  }

  // The built-in choice first.
  std::vector<std::string> kernel_configs(const AttentionProblem& problem) const override {
    const TileConfig& builtin = builtin_config(problem);
    std::vector<std::string> names = {builtin.name};
    for (const TileConfig& config : kTileConfigs)
      if (&config != &builtin) names.emplace_back(config.name);
    return names;
  }
  // A tile config from kernel_configs(), optionally with the ISA as the kernel config reports
  // it ("q96-k96/avx2"), so a reported config can be forced again as it is.
  void force_kernel_config(std::string_view name) override {
    if (name.empty()) {
      forced_ = nullptr;
      forced_isa_.reset();
      return;
    }
    const std::size_t slash = name.find('/');
    const TileConfig& tiles = find_config(name.substr(0, slash));
    std::optional<CpuIsa> isa;
    if (slash != std::string_view::npos) {
      const std::string_view isa_name = name.substr(slash + 1);
      isa = parse_cpu_isa(isa_name);
      if (!isa)
        throw Error(ErrorKind::Usage,
                    fmt::format("cpu-flash: kernel config '{}': ISA '{}' unknown; allowed: avx2, avx512", name, isa_name));
      if (!cpu_supports(*isa))
        throw Error(ErrorKind::Unsupported, fmt::format("cpu-flash: kernel config '{}': this CPU has no {} (it runs {})",
                                                        name, isa_name, to_string(widest_cpu_isa())));
    }
    forced_ = &tiles;
    forced_isa_ = isa;
  }
  std::string last_kernel_config() const override { return last_; }

  void forward(const AttentionProblem& problem, const AttentionArgs& args, Stream) override {
    const Support support = supports(problem);
    ATTNSUITE_CHECK(support.ok, ErrorKind::Unsupported, "cpu-flash: " + support.reason);
    check_args(name(), problem, args, /*contiguous_last_dim=*/true);
    const TileConfig& tiles = choose(problem);
    const CpuIsa isa = forced_isa_ ? *forced_isa_ : selected_cpu_isa();
    last_ = fmt::format("{}/{}", tiles.name, to_string(isa));
    switch (isa) {
      case CpuIsa::Avx512: flash::forward_avx512(problem, args, tiles); return;
      case CpuIsa::Avx2: flash::forward_avx2(problem, args, tiles); return;
    }
  }

 private:
  static const TileConfig& find_config(std::string_view name) {
    std::string allowed;
    for (const TileConfig& config : kTileConfigs) {
      if (name == config.name) return config;
      allowed += (allowed.empty() ? "" : ", ") + std::string(config.name);
    }
    throw Error(ErrorKind::Usage, fmt::format("cpu-flash: kernel config '{}' unknown; allowed: {}", name, allowed));
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
  // Forced, else the cache's entry for this CPU, thread count, ISA and shape class, else built in.
  const TileConfig& choose(const AttentionProblem& problem) const {
    if (forced_ != nullptr) return *forced_;
    if (KernelConfigCache::global().size() == 0) return builtin_config(problem);  // no cache: no key to build
    if (const auto cached = KernelConfigCache::global().lookup(cpu_kernel_config_key("cpu-flash", problem))) {
      for (const TileConfig& config : kTileConfigs)
        if (*cached == config.name) return config;
    }
    return builtin_config(problem);
  }
  const TileConfig* forced_ = nullptr;
  std::optional<CpuIsa> forced_isa_;  // else selected_cpu_isa() at each call
  std::string last_;
};

}  // namespace

std::unique_ptr<Backend> make_flash_backend() { return std::make_unique<FlashBackend>(); }

}  // namespace attnsuite::cpu
