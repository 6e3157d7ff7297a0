// `attnsuite list` and `attnsuite info`.
#include <fmt/format.h>

#include <CLI/Version.hpp>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "attnsuite/registry.hpp"
#include "bench/plan.hpp"
#include "bench/result.hpp"
#include "commands.hpp"
#include "core/host_info.hpp"
#include "core/peak.hpp"
#include "core/presets.hpp"
#include "report/table.hpp"

#if ATTNSUITE_HAVE_CUDA
#include "cuda/cuda_backends.hpp"
#endif

extern "C" char* openblas_get_config();

namespace attnsuite::cli {

namespace {

// Whether a backend runs here, for `list`: a GPU backend on a machine without a GPU says that
// first (flash3-fp8 used to answer with its dtype rule); else a small problem is asked about in
// each dtype, the device's usual one first, and the first that runs is a yes (flash3-fp8 takes
// bf16 only). No dtype running: the first reason that is not about the dtype (the GPU's
// generation, say), else the usual dtype's. `backward` (when given) says whether it has a backward
// for the problem that runs.
Support runs_here(Backend& backend, bool* backward = nullptr) {
#if ATTNSUITE_HAVE_CUDA
  if (backend.device().type == DeviceType::Cuda)
    if (const std::string no_gpu = cuda::cuda_unavailable_reason(); !no_gpu.empty()) return Support::no(no_gpu);
#endif
  AttentionProblem p;
  p.batch = 1;
  p.heads_q = p.heads_kv = 1;
  p.seq_q = p.seq_kv = 128;
  p.head_dim = 64;
  const bool cpu = backend.device().type == DeviceType::Cpu;
  std::vector<Support> refusals;
  for (const DType dtype :
       cpu ? std::vector{DType::F32, DType::F16, DType::BF16} : std::vector{DType::F16, DType::BF16, DType::F32}) {
    p.dtype = dtype;
    Support support = backend.supports(p);
    if (support) {
      if (backward) *backward = static_cast<bool>(backend.supports_backward(p));
      return support;
    }
    refusals.push_back(std::move(support));
  }
  for (const Support& refusal : refusals)
    if (refusal.reason.rfind("dtype", 0) != 0) return refusal;
  return refusals.front();
}

}  // namespace

Action add_list(CLI::App&) {
  return [] {
    Registry& registry = Registry::global();
    // Fitted to the terminal (the free-text columns wrap): it was 480 columns wide.
    report::TextTable backends({{"backend"},
                                {"device"},
                                {"what it is", report::Align::Left, 0, true},
                                {"here", report::Align::Left, 0, true},
                                {"backward", report::Align::Left, 0, true},
                                {"supports", report::Align::Left, 0, true}});
    for (const auto& name : registry.names()) {
      Backend& backend = registry.find(name);
      bool backward = false;
      const Support support = runs_here(backend, &backward);
      std::string what(backend.display_name());
      if (!backend.peer_of().empty()) what += fmt::format(" [peer: {}]", backend.peer_of());
      // backward: whether it has one (training: bench --pass bwd, fwd+bwd) for the problem that
      // runs, or the backend's word on an experimental one.
      const std::string backward_column = !backend.backward_status().empty() ? std::string(backend.backward_status())
                                          : backward                         ? "yes"
                                                                             : "no";
      backends.add_row({name, std::string(to_string(backend.device().type)), what,
                        support ? "yes" : "no: " + support.reason, backward_column, backend.capabilities()});
    }
    const std::size_t width = report::terminal_columns();
    fmt::print("Backends\n{}\n", backends.terminal(width));
    report::TextTable models({{"model"},
                              {"hidden", report::Align::Right},
                              {"q heads", report::Align::Right},
                              {"kv heads", report::Align::Right},
                              {"head dim", report::Align::Right},
                              {"note", report::Align::Left, 0, true}});
    for (const auto& m : model_presets())
      models.add_row({m.name, std::to_string(m.hidden), std::to_string(m.heads_q), std::to_string(m.heads_kv),
                      std::to_string(m.head_dim), m.note});
    fmt::print("Model presets (--model)\n{}\n", models.terminal(width));
    std::string suites;
    for (const auto& s : bench::embedded_suite_names()) suites += (suites.empty() ? "" : ", ") + s;
    fmt::print("Suites (--suite): {}\n", suites);
    return kExitOk;
  };
}

Action add_info(CLI::App& app) {
  auto json = std::make_shared<bool>(false);
  app.add_flag("--json", *json, "Print as JSON");
  return [json] {
    const HostInfo& host = host_info();
    // The peak of the widest ISA the CPU has (AVX-512 where it exists), and AVX2's beside it
    // when that differs: equal where 512-bit FMAs are double-pumped (Zen 4), half on a Xeon
    // with two 512-bit FMA units. The CPU kernels run `kernels_isa` (ATTNSUITE_CPU_ISA may
    // narrow it).
    const cpu::CpuIsa isa = cpu::widest_cpu_isa();
    const cpu::CpuIsa kernels_isa = cpu::selected_cpu_isa();
    const double peak = cpu::measure_fp32_fma_peak_gflops(isa);
    const bool wider_than_avx2 = isa != cpu::CpuIsa::Avx2;
    const double peak_avx2 = wider_than_avx2 ? cpu::measure_fp32_fma_peak_gflops(cpu::CpuIsa::Avx2) : peak;
    const double copy = cpu::measure_host_copy_gbps();
    const double dispatch = cpu::measure_dispatch_us();
    nlohmann::json info = {
        {"attnsuite", ATTNSUITE_VERSION},
        {"cpu", host.cpu_model},
        {"threads", host.threads},
        {"simd", host.simd},
        {"llc_mib", host.llc_bytes / 1048576.0},
        {"memory_gib", host.total_memory_bytes / 1073741824.0},
        {"cpu_kernels_isa", cpu::to_string(kernels_isa)},
        {"fp32_fma_peak_gflops_measured", peak},
        {"fp32_fma_peak_isa", cpu::to_string(isa)},
        {"host_copy_gbps_measured", copy},
        {"cpu_dispatch_us_measured", dispatch},
        {"openblas", openblas_get_config()},
        {"cuda_build", static_cast<bool>(ATTNSUITE_HAVE_CUDA)},
        {"libraries",
         {{"fmt", fmt::format("{}.{}.{}", FMT_VERSION / 10000, FMT_VERSION / 100 % 100, FMT_VERSION % 100)},
          {"nlohmann_json", fmt::format("{}.{}.{}", NLOHMANN_JSON_VERSION_MAJOR, NLOHMANN_JSON_VERSION_MINOR,
                                        NLOHMANN_JSON_VERSION_PATCH)},
          {"CLI11", CLI11_VERSION}}},
    };
    if (wider_than_avx2) info["fp32_fma_peak_gflops_avx2_measured"] = peak_avx2;
#if ATTNSUITE_HAVE_CUDA
    nlohmann::json gpus = nlohmann::json::array();
    for (int i = 0; i < cuda::cuda_device_count(); ++i) {
      const cuda::CudaDeviceInfo d = cuda::query_cuda_device(i);
      gpus.push_back({{"index", i},
                      {"name", d.name},
                      {"driver", d.driver_version},
                      {"cuda_runtime", d.runtime_version},
                      {"compute_capability", d.compute_capability()},
                      {"sms", d.sm_count},
                      {"l2_mib", d.l2_bytes / 1048576.0},
                      {"memory_gib", d.memory_bytes / 1073741824.0},
                      {"ceilings", bench::to_json(cuda::measure_gpu_ceilings(i))}});
    }
    info["gpus"] = gpus;
    if (gpus.empty()) info["gpu_unavailable"] = cuda::cuda_unavailable_reason();
#endif
    if (*json) {
      fmt::print("{}\n", info.dump(2));
      return kExitOk;
    }
    fmt::print("attnsuite {}\n", ATTNSUITE_VERSION);
    fmt::print("CPU        {} ({} threads; SIMD: {}; last-level cache {:.0f} MiB; memory {:.1f} GiB)\n", host.cpu_model,
               host.threads, host.simd, host.llc_bytes / 1048576.0, host.total_memory_bytes / 1073741824.0);
    fmt::print("fp32 peak  {:.1f} GFLOP/s measured (independent {} FMA chains on every thread{}); CPU kernels run {}\n",
               peak, isa == cpu::CpuIsa::Avx512 ? "AVX-512" : "AVX2",
               wider_than_avx2 ? fmt::format("; AVX2: {:.1f}", peak_avx2) : std::string(), cpu::to_string(kernels_isa));
    fmt::print(
        "host copy  {:.1f} GB/s measured (memcpy on every thread, bytes read + written); "
        "dispatch {:.1f} µs (empty parallel_for)\n",
        copy, dispatch);
    fmt::print("OpenBLAS   {}\n", openblas_get_config());
#if ATTNSUITE_HAVE_CUDA
    for (const auto& g : info["gpus"])
      fmt::print("GPU {}      {} (sm_{}, {} SMs, {:.0f} MiB L2, {:.1f} GiB; driver {}, CUDA runtime {})\n",
                 g["index"].get<int>(), g["name"].get<std::string>(), g["compute_capability"].get<int>(),
                 g["sms"].get<int>(), g["l2_mib"].get<double>(), g["memory_gib"].get<double>(),
                 g["driver"].get<std::string>(), g["cuda_runtime"].get<int>());
    for (const auto& g : info["gpus"]) {
      const auto& c = g["ceilings"];
      fmt::print(
          "GPU {} ceilings: copy {:.0f} GB/s; GEMM {} fp16 {:.0f}, bf16 {:.0f}, fp8 {:.0f} TFLOP/s; launch {:.1f} µs\n",
          g["index"].get<int>(), c["gpu_copy_gbps"].get<double>(), c["gpu_gemm_shape"].get<std::string>(),
          c["gpu_fp16_tflops"].get<double>(), c["gpu_bf16_tflops"].get<double>(), c["gpu_fp8_tflops"].get<double>(),
          c["gpu_launch_us"].get<double>());
    }
    if (info["gpus"].empty()) fmt::print("GPU        {}\n", info["gpu_unavailable"].get<std::string>());
#else
    fmt::print("CUDA       not built (ATTNSUITE_CUDA=OFF or no nvcc)\n");
#endif
    fmt::print("Libraries  fmt {}, nlohmann_json {}, CLI11 {}\n", info["libraries"]["fmt"].get<std::string>(),
               info["libraries"]["nlohmann_json"].get<std::string>(), CLI11_VERSION);
    return kExitOk;
  };
}

}  // namespace attnsuite::cli
