#include "bench/result.hpp"

#include <fmt/format.h>

#include <array>
#include <cmath>
#include <limits>
#include <variant>

#include "attnsuite/error.hpp"
#include "core/enum_names.hpp"

namespace attnsuite::bench {

namespace {

// One table drives the column list, JSON writing and reading, and the column types, so a new
// column is added in exactly one place.
using Member = std::variant<std::string ResultRow::*, int ResultRow::*, std::uint64_t ResultRow::*, bool ResultRow::*,
                            std::optional<double> ResultRow::*, CaseStatus ResultRow::*>;

struct Field {
  const char* name;
  Member member;
};

const std::array<Field, 67> kFields = {{
    {"backend", &ResultRow::backend},
    {"display_name", &ResultRow::display_name},
    {"peer_of", &ResultRow::peer_of},
    {"device", &ResultRow::device},
    {"gpu", &ResultRow::gpu},
    {"dtype", &ResultRow::dtype},
    {"layout", &ResultRow::layout},
    {"batch", &ResultRow::batch},
    {"heads_q", &ResultRow::heads_q},
    {"heads_kv", &ResultRow::heads_kv},
    {"seq_q", &ResultRow::seq_q},
    {"seq_kv", &ResultRow::seq_kv},
    {"head_dim", &ResultRow::head_dim},
    {"causal", &ResultRow::causal},
    {"window_left", &ResultRow::window_left},
    {"window_right", &ResultRow::window_right},
    {"generator", &ResultRow::generator},
    {"seed", &ResultRow::seed},
    {"pass", &ResultRow::pass},
    {"ms_median", &ResultRow::ms_median},
    {"ms_mean", &ResultRow::ms_mean},
    {"ms_p05", &ResultRow::ms_p05},
    {"ms_p95", &ResultRow::ms_p95},
    {"ms_min", &ResultRow::ms_min},
    {"ms_stddev", &ResultRow::ms_stddev},
    {"reps", &ResultRow::reps},
    {"tokens_per_s", &ResultRow::tokens_per_s},
    {"tflops", &ResultRow::tflops},
    {"gbps", &ResultRow::gbps},
    {"peak_mem_mib", &ResultRow::peak_mem_mib},
    {"mem_reserved_mib", &ResultRow::mem_reserved_mib},
    {"mem_vs_vanilla", &ResultRow::mem_vs_vanilla},
    {"speedup_vs_vanilla", &ResultRow::speedup_vs_vanilla},
    {"max_abs_err", &ResultRow::max_abs_err},
    {"rel_l2", &ResultRow::rel_l2},
    {"rel_l1", &ResultRow::rel_l1},
    {"cos_sim", &ResultRow::cos_sim},
    {"rmse", &ResultRow::rmse},
    {"accuracy_fraction", &ResultRow::accuracy_fraction},
    {"dq_max_abs_err", &ResultRow::dq_max_abs_err},
    {"dq_rel_l2", &ResultRow::dq_rel_l2},
    {"dq_rel_l1", &ResultRow::dq_rel_l1},
    {"dq_cos_sim", &ResultRow::dq_cos_sim},
    {"dk_max_abs_err", &ResultRow::dk_max_abs_err},
    {"dk_rel_l2", &ResultRow::dk_rel_l2},
    {"dk_rel_l1", &ResultRow::dk_rel_l1},
    {"dk_cos_sim", &ResultRow::dk_cos_sim},
    {"dv_max_abs_err", &ResultRow::dv_max_abs_err},
    {"dv_rel_l2", &ResultRow::dv_rel_l2},
    {"dv_rel_l1", &ResultRow::dv_rel_l1},
    {"dv_cos_sim", &ResultRow::dv_cos_sim},
    {"sparsity", &ResultRow::sparsity},
    {"kernel_config", &ResultRow::kernel_config},
    {"work_order", &ResultRow::work_order},
    {"backend_options", &ResultRow::backend_options},
    {"predicted_sparsity", &ResultRow::predicted_sparsity},
    {"predictor_ms", &ResultRow::predictor_ms},
    {"effective_tflops", &ResultRow::effective_tflops},
    {"clock_mhz", &ResultRow::clock_mhz},
    {"clock_mhz_min", &ResultRow::clock_mhz_min},
    {"gpu_util_pct", &ResultRow::gpu_util_pct},
    {"intensity", &ResultRow::intensity},
    {"compute_ceiling_pct", &ResultRow::compute_ceiling_pct},
    {"memory_ceiling_pct", &ResultRow::memory_ceiling_pct},
    {"bottleneck", &ResultRow::bottleneck},
    {"status", &ResultRow::status},
    {"reason", &ResultRow::reason},
}};

template <class... Ts>
struct Overloaded : Ts... {
  using Ts::operator()...;
};
template <class... Ts>
Overloaded(Ts...) -> Overloaded<Ts...>;

// JSON has no NaN or infinity; an accuracy metric of a kernel that wrote NaN must not read back
// as "not measured", so non-finite values are written as the strings "nan", "inf", "-inf".
template <class Json>
Json number_to_json(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  return value;
}

template <class Json>
Json row_to_json(const ResultRow& row) {
  Json out = Json::object();
  for (const Field& field : kFields) {
    out[field.name] = std::visit(Overloaded{
                                     [&](std::optional<double> ResultRow::*m) -> Json {
                                       const auto& value = row.*m;
                                       return value ? number_to_json<Json>(*value) : Json(nullptr);
                                     },
                                     [&](CaseStatus ResultRow::*m) -> Json { return std::string(to_string(row.*m)); },
                                     [&](auto m) -> Json { return row.*m; },
                                 },
                                 field.member);
  }
  return out;
}

std::string describe_json(const nlohmann::json& value) {
  std::string text = value.dump();
  if (text.size() > 40) text = text.substr(0, 37) + "...";
  return fmt::format("{} {}", value.type_name(), text);
}

[[noreturn]] void malformed(std::string_view what, std::string_view name, std::string_view expected,
                            const nlohmann::json& got) {
  throw Error(ErrorKind::Io,
              fmt::format("{}: field '{}': expected {}, got {}", what, name, expected, describe_json(got)));
}

// Error(Io) "<what>: expected a JSON object, got ..." unless value is one.
void require_object(const nlohmann::json& value, std::string_view what) {
  if (!value.is_object())
    throw Error(ErrorKind::Io, fmt::format("{}: expected a JSON object, got {}", what, describe_json(value)));
}

std::string read_string(const nlohmann::json& value, std::string_view what, std::string_view name) {
  if (value.is_null()) return {};
  if (!value.is_string()) malformed(what, name, "a string", value);
  return value.get<std::string>();
}

// Integers written by other tools (Python, spreadsheets) may arrive as 32.0: accept whole floats.
template <class Int>
Int read_integer(const nlohmann::json& value, std::string_view what, std::string_view name) {
  if (value.is_number_unsigned()) {
    const auto v = value.get<std::uint64_t>();
    if (v <= static_cast<std::uint64_t>(std::numeric_limits<Int>::max())) return static_cast<Int>(v);
  } else if (value.is_number_integer()) {
    const auto v = value.get<std::int64_t>();
    if constexpr (std::is_signed_v<Int>) {
      if (v >= std::numeric_limits<Int>::min() && v <= std::numeric_limits<Int>::max()) return static_cast<Int>(v);
    } else if (v >= 0) {
      return static_cast<Int>(v);
    }
  } else if (value.is_number_float()) {
    const double v = value.get<double>();
    if (std::trunc(v) == v && v >= static_cast<double>(std::numeric_limits<Int>::min()) &&
        v <= static_cast<double>(std::numeric_limits<Int>::max()))
      return static_cast<Int>(v);
  }
  malformed(what, name, std::is_signed_v<Int> ? "a 32-bit integer" : "a non-negative 64-bit integer", value);
}

std::optional<double> read_number(const nlohmann::json& value, std::string_view what, std::string_view name) {
  if (value.is_null()) return std::nullopt;
  if (value.is_number()) return value.get<double>();
  if (value.is_string()) {
    const auto& text = value.get_ref<const std::string&>();
    if (text == "nan") return std::numeric_limits<double>::quiet_NaN();
    if (text == "inf") return std::numeric_limits<double>::infinity();
    if (text == "-inf") return -std::numeric_limits<double>::infinity();
  }
  malformed(what, name, "a number, null, \"nan\", \"inf\" or \"-inf\"", value);
}

bool read_bool(const nlohmann::json& value, std::string_view what, std::string_view name) {
  if (value.is_boolean()) return value.get<bool>();
  if (value.is_number_integer() && (value.get<std::int64_t>() == 0 || value.get<std::int64_t>() == 1))
    return value.get<std::int64_t>() == 1;
  malformed(what, name, "true or false", value);
}

constexpr EnumName<CaseStatus> kCaseStatusNames[] = {
    {CaseStatus::Ok, "ok"}, {CaseStatus::Skipped, "skipped"}, {CaseStatus::Failed, "failed"}};
}  // namespace

std::string_view to_string(CaseStatus status) { return name_of(kCaseStatusNames, status, "unknown"); }

std::optional<CaseStatus> parse_case_status(std::string_view text) { return value_of(kCaseStatusNames, text); }

std::string ResultRow::shape_key() const {
  return fmt::format("{} {} B{} H{}/{} N{}/{} D{} causal={} window={},{} gen={} seed={}", dtype, layout, batch, heads_q,
                     heads_kv, seq_q, seq_kv, head_dim, causal ? 1 : 0, window_left, window_right, generator, seed) +
         (pass == "fwd" || pass.empty() ? "" : " pass=" + pass);
}

std::string ResultRow::case_key() const { return backend + " | " + shape_key(); }

const std::vector<std::string>& result_columns() {
  static const std::vector<std::string> columns = [] {
    std::vector<std::string> names;
    for (const Field& field : kFields) names.emplace_back(field.name);
    return names;
  }();
  return columns;
}

std::optional<ColumnType> column_type(std::string_view column) {
  for (const Field& field : kFields) {
    if (column != field.name) continue;
    return std::visit(Overloaded{
                          [](std::string ResultRow::*) { return ColumnType::Text; },
                          [](CaseStatus ResultRow::*) { return ColumnType::Text; },
                          [](int ResultRow::*) { return ColumnType::Integer; },
                          [](std::uint64_t ResultRow::*) { return ColumnType::Integer; },
                          [](bool ResultRow::*) { return ColumnType::Boolean; },
                          [](std::optional<double> ResultRow::*) { return ColumnType::Number; },
                      },
                      field.member);
  }
  return std::nullopt;
}

nlohmann::json to_json(const ResultRow& row) { return row_to_json<nlohmann::json>(row); }

nlohmann::ordered_json to_ordered_json(const ResultRow& row) { return row_to_json<nlohmann::ordered_json>(row); }

ResultRow row_from_json(const nlohmann::json& value) {
  constexpr std::string_view what = "result row";
  require_object(value, what);
  for (const char* required : {"backend", "status"}) {
    if (!value.contains(required)) {
      throw Error(ErrorKind::Io, fmt::format("{}: field '{}' is missing", what, required));
    }
  }
  ResultRow row;
  for (const Field& field : kFields) {
    const auto found = value.find(field.name);
    if (found == value.end()) continue;  // written by an older version: keep the default
    const nlohmann::json& cell = *found;
    std::visit(Overloaded{
                   [&](std::string ResultRow::*m) { row.*m = read_string(cell, what, field.name); },
                   [&](int ResultRow::*m) { row.*m = read_integer<int>(cell, what, field.name); },
                   [&](std::uint64_t ResultRow::*m) { row.*m = read_integer<std::uint64_t>(cell, what, field.name); },
                   [&](bool ResultRow::*m) { row.*m = read_bool(cell, what, field.name); },
                   [&](std::optional<double> ResultRow::*m) { row.*m = read_number(cell, what, field.name); },
                   [&](CaseStatus ResultRow::*m) {
                     const auto status = cell.is_string() ? parse_case_status(cell.get<std::string>()) : std::nullopt;
                     if (!status) malformed(what, field.name, "\"ok\", \"skipped\" or \"failed\"", cell);
                     row.*m = *status;
                   },
               },
               field.member);
  }
  if (row.backend.empty()) {
    throw Error(ErrorKind::Io, fmt::format("{}: field 'backend' is empty", what));
  }
  return row;
}

namespace {
// The ceilings by JSON key, so writing and reading cannot drift apart.
const std::array<std::pair<const char*, double DeviceCeilings::*>, 8> kCeilings = {{
    {"cpu_fp32_gflops", &DeviceCeilings::cpu_fp32_gflops},
    {"host_copy_gbps", &DeviceCeilings::host_copy_gbps},
    {"cpu_dispatch_us", &DeviceCeilings::cpu_dispatch_us},
    {"gpu_copy_gbps", &DeviceCeilings::gpu_copy_gbps},
    {"gpu_fp16_tflops", &DeviceCeilings::gpu_fp16_tflops},
    {"gpu_bf16_tflops", &DeviceCeilings::gpu_bf16_tflops},
    {"gpu_fp8_tflops", &DeviceCeilings::gpu_fp8_tflops},
    {"gpu_launch_us", &DeviceCeilings::gpu_launch_us},
}};
}  // namespace

nlohmann::json to_json(const DeviceCeilings& ceilings) {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [name, member] : kCeilings) out[name] = ceilings.*member;
  out["gpu_gemm_shape"] = ceilings.gpu_gemm_shape;
  return out;
}

DeviceCeilings ceilings_from_json(const nlohmann::json& value) {
  constexpr std::string_view what = "run header ceilings";
  require_object(value, what);
  DeviceCeilings ceilings;
  for (const auto& [name, member] : kCeilings) {
    const auto it = value.find(name);
    if (it == value.end() || it->is_null()) continue;
    const auto number = read_number(*it, what, name);
    if (number && std::isfinite(*number) && *number >= 0) ceilings.*member = *number;
  }
  if (const auto it = value.find("gpu_gemm_shape"); it != value.end())
    ceilings.gpu_gemm_shape = read_string(*it, what, "gpu_gemm_shape");
  return ceilings;
}

nlohmann::json to_json(const RunHeader& header) {
  return {
      {"tool_version", header.tool_version},
      {"git_commit", header.git_commit},
      {"started_at", header.started_at},
      {"finished_at", header.finished_at},
      {"hostname", header.hostname},
      {"cpu_model", header.cpu_model},
      {"cpu_threads", header.cpu_threads},
      {"simd", header.simd},
      {"cpu_fp32_peak_gflops", header.cpu_fp32_peak_gflops},
      {"gpu_name", header.gpu_name},
      {"gpu_driver", header.gpu_driver},
      {"cuda_version", header.cuda_version},
      {"cudnn_version", header.cudnn_version},
      {"torch_version", header.torch_version},
      {"ceilings", to_json(header.ceilings)},
      {"suite", header.suite},
      {"settings", header.settings},
      {"interrupted", header.interrupted},
  };
}

RunHeader header_from_json(const nlohmann::json& value) {
  constexpr std::string_view what = "run header";
  require_object(value, what);
  RunHeader header;
  const auto text = [&](const char* name, std::string& out) {
    if (const auto it = value.find(name); it != value.end()) out = read_string(*it, what, name);
  };
  text("tool_version", header.tool_version);
  text("git_commit", header.git_commit);
  text("started_at", header.started_at);
  text("finished_at", header.finished_at);
  text("hostname", header.hostname);
  text("cpu_model", header.cpu_model);
  text("simd", header.simd);
  text("gpu_name", header.gpu_name);
  text("gpu_driver", header.gpu_driver);
  text("cuda_version", header.cuda_version);
  text("cudnn_version", header.cudnn_version);
  text("torch_version", header.torch_version);
  text("suite", header.suite);
  if (const auto it = value.find("cpu_threads"); it != value.end() && !it->is_null()) {
    header.cpu_threads = read_integer<int>(*it, what, "cpu_threads");
  }
  if (const auto it = value.find("cpu_fp32_peak_gflops"); it != value.end() && it->is_number()) {
    header.cpu_fp32_peak_gflops = it->get<double>();
  }
  if (const auto it = value.find("ceilings"); it != value.end() && !it->is_null()) {
    header.ceilings = ceilings_from_json(*it);
  }
  // Files written before the ceilings existed carry only the CPU's FMA peak.
  if (header.ceilings.cpu_fp32_gflops == 0) header.ceilings.cpu_fp32_gflops = header.cpu_fp32_peak_gflops;
  if (const auto it = value.find("settings"); it != value.end()) header.settings = *it;
  if (const auto it = value.find("interrupted"); it != value.end() && !it->is_null()) {
    header.interrupted = read_bool(*it, what, "interrupted");
  }
  return header;
}

}  // namespace attnsuite::bench
