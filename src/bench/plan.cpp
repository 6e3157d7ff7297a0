#include "bench/plan.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <toml++/toml.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <limits>
#include <set>

#include "attnsuite/error.hpp"
#include "bench/embedded_suites.hpp"
#include "bench/generators.hpp"
#include "core/atomic_file.hpp"
#include "core/enum_names.hpp"
#include "core/json_limits.hpp"
#include "core/presets.hpp"

namespace attnsuite::bench {

namespace {

constexpr int kMaxSize = 1 << 30;
// A suite file larger than this is refused before it is read (the largest in bench/suites is
// 1 KiB).
constexpr std::uintmax_t kMaxSuiteFileBytes = std::uintmax_t{16} << 20;

using Json = nlohmann::json;

// A value as error messages show it: scalars as JSON (strings cut to 60 characters, bytes that
// are not UTF-8 replaced), containers by their size only. Never recursive, so a hostile,
// deeply nested value cannot overflow the stack or make a megabyte-long error line.
std::string describe_value(const Json& value) {
  if (value.is_array()) return fmt::format("a list of {} items", value.size());
  if (value.is_object()) return fmt::format("an object with {} keys", value.size());
  if (value.is_string()) {
    std::string text = value.get<std::string>();
    if (text.size() > 60) text = text.substr(0, 57) + "...";
    return Json(text).dump(-1, ' ', false, Json::error_handler_t::replace);
  }
  return value.dump(-1, ' ', false, Json::error_handler_t::replace);
}

[[noreturn]] void bad(const std::string& source, const std::string& key, const std::string& what) {
  throw Error(ErrorKind::Usage, fmt::format("suite '{}': '{}' {}", source, key, what));
}

// A key may hold one value or a list of values.
std::vector<Json> as_list(const Json& value) {
  if (value.is_array()) return std::vector<Json>(value.begin(), value.end());
  return {value};
}

std::vector<int> int_list(const Json& value, const std::string& source, const std::string& key, int min = 1,
                          int max = kMaxSize) {
  std::vector<int> out;
  for (const auto& item : as_list(value)) {
    if (!item.is_number_integer() && !item.is_number_unsigned())
      bad(source, key,
          fmt::format("must be an integer or a list of integers between {} and {}, got {}", min, max,
                      describe_value(item)));
    // Unsigned values above INT64_MAX would wrap to negative numbers in get<std::int64_t>().
    if (item.is_number_unsigned() && item.get<std::uint64_t>() > static_cast<std::uint64_t>(max))
      bad(source, key, fmt::format("= {} is out of range: allowed {}..{}", item.get<std::uint64_t>(), min, max));
    const auto number = item.get<std::int64_t>();
    if (number < min || number > max)
      bad(source, key, fmt::format("= {} is out of range: allowed {}..{}", number, min, max));
    out.push_back(static_cast<int>(number));
  }
  if (out.empty()) bad(source, key, "is an empty list");
  return out;
}

// A text as error messages show it: control characters escaped as in JSON, so that a name
// with a newline in it still makes a one-line message.
std::string printable(const std::string& text) {
  const std::string quoted = Json(text).dump(-1, ' ', false, Json::error_handler_t::replace);
  return quoted.substr(1, quoted.size() - 2);
}

// Names (backends, models, dtypes, ...) never hold control characters; free text (the
// description) may.
std::vector<std::string> string_list(const Json& value, const std::string& source, const std::string& key,
                                     bool free_text = false) {
  std::vector<std::string> out;
  for (const auto& item : as_list(value)) {
    if (!item.is_string())
      bad(source, key, fmt::format("must be a string or a list of strings, got {}", describe_value(item)));
    out.push_back(item.get<std::string>());
    const bool control = std::any_of(out.back().begin(), out.back().end(),
                                     [](char c) { return static_cast<unsigned char>(c) < 0x20 || c == 0x7f; });
    if (control && !free_text)
      bad(source, key, fmt::format("= {} is not allowed: a name without control characters", describe_value(item)));
  }
  if (out.empty()) bad(source, key, "is an empty list");
  return out;
}

double number_in(const Json& value, const std::string& source, const std::string& key, double min, double max) {
  if (!value.is_number()) bad(source, key, fmt::format("must be a number, got {}", describe_value(value)));
  const double number = value.get<double>();
  if (!(number >= min && number <= max))
    bad(source, key, fmt::format("= {} is out of range: allowed {}..{}", number, min, max));
  return number;
}

void check_keys(const Json& object, const std::string& source, const std::string& where,
                const std::set<std::string>& allowed) {
  if (!object.is_object()) bad(source, where, fmt::format("must be an object, got {}", describe_value(object)));
  for (const auto& [key, value] : object.items()) {
    if (!allowed.contains(key))
      throw Error(ErrorKind::Usage,
                  fmt::format("suite '{}': unknown key '{}{}'; allowed: {}", source, where.empty() ? "" : where + ".",
                              printable(key), fmt::join(allowed, ", ")));
  }
}

Json toml_to_json(const toml::node& node) {
  if (const auto* table = node.as_table()) {
    Json out = Json::object();
    for (const auto& [key, value] : *table) out[std::string(key.str())] = toml_to_json(value);
    return out;
  }
  if (const auto* array = node.as_array()) {
    Json out = Json::array();
    for (const auto& value : *array) out.push_back(toml_to_json(value));
    return out;
  }
  if (const auto* value = node.as_string()) return value->get();
  if (const auto* value = node.as_integer()) return value->get();
  if (const auto* value = node.as_floating_point()) return value->get();
  if (const auto* value = node.as_boolean()) return value->get();
  throw Error(ErrorKind::Usage, "suite: dates and times are not allowed in a suite file");
}

}  // namespace

Json parse_suite_text(const std::string& text, const std::string& extension, const std::string& source) {
  if (extension == ".toml") {
    try {
      return toml_to_json(toml::parse(text, source));
    } catch (const toml::parse_error& error) {
      // toml++ quotes the offending text, newlines included (found by fuzz_suite): escaped here.
      throw Error(ErrorKind::Usage,
                  fmt::format("suite '{}': malformed TOML at line {}: {}", source, error.source().begin.line,
                              printable(std::string(error.description()))));
    }
  }
  // Nesting is refused while parsing (core/json_limits.hpp); a valid suite is 3 levels deep.
  const auto limit_depth = json_depth_limit([&] {
    throw Error(ErrorKind::Usage, fmt::format("suite '{}': nested deeper than {} levels; a suite holds objects of "
                                              "values and lists of values",
                                              source, kMaxJsonDepth));
  });
  try {
    return Json::parse(text, limit_depth);
  } catch (const Json::exception& error) {
    // parse_error, and out_of_range for a number beyond double ("1e999", found by fuzz_suite).
    throw Error(ErrorKind::Usage, fmt::format("suite '{}': malformed JSON: {}", source, error.what()));
  }
}

std::vector<std::string> embedded_suite_names() {
  std::vector<std::string> names;
  for (const auto& suite : embedded_suites()) names.emplace_back(suite.name);
  return names;
}

Json load_suite_json(const std::string& name_or_path) {
  for (const auto& suite : embedded_suites())
    if (suite.name == name_or_path)
      return parse_suite_text(std::string(suite.text), std::string(suite.extension), name_or_path);
  const std::filesystem::path path(name_or_path);
  const std::string extension = path.extension().string();
  if (extension != ".json" && extension != ".toml")
    throw Error(ErrorKind::Usage, fmt::format("unknown suite '{}'; give a .json or .toml file or one of: {}",
                                              name_or_path, fmt::join(embedded_suite_names(), ", ")));
  std::error_code error;
  const std::uintmax_t bytes = std::filesystem::file_size(path, error);
  if (!error && bytes > kMaxSuiteFileBytes)
    throw Error(ErrorKind::Usage, fmt::format("suite file '{}' is {:.1f} MiB; a suite file may hold at most {} MiB",
                                              name_or_path, bytes / 1048576.0, kMaxSuiteFileBytes >> 20));
  std::string text;
  try {
    text = report::read_text_file(path);
  } catch (const Error& read_error) {  // a missing file is the user's argument: usage, exit 2
    throw Error(ErrorKind::Usage, fmt::format("suite file: {}", read_error.what()));
  }
  return parse_suite_text(text, extension, name_or_path);
}

void name_custom_sweep(Json& suite, const Json& overrides, const std::string& what) {
  bool changes_cases = false;
  for (const auto& [key, value] : overrides.items())
    changes_cases = changes_cases || (key != "timing" && key != "accuracy");
  if (!changes_cases || !suite.is_object()) return;
  suite["name"] = "custom";
  suite["description"] = what;
}

Json merge_suite(Json base, const Json& overrides) {
  if (!base.is_object()) base = Json::object();
  for (const auto& [key, value] : overrides.items()) {
    if (key == "timing" || key == "accuracy" || key == "backend_options" || key == "kernel_config") {
      if (base.contains(key) && !base[key].is_object())
        throw Error(ErrorKind::Usage,
                    fmt::format("suite: '{}' must be an object, got {}", key, describe_value(base[key])));
      if (!value.is_object()) {
        base[key] = value;  // parse_suite names what is wrong with it
        continue;
      }
      for (const auto& [inner, inner_value] : value.items()) base[key][inner] = inner_value;
    } else if (key == "model") {
      for (const char* head_key : {"heads", "kv_heads", "head_dim", "hidden"}) base.erase(head_key);
      base[key] = value;
    } else if (key == "heads" || key == "kv_heads" || key == "head_dim" || key == "hidden") {
      base.erase("model");
      if (key == "heads") base.erase("hidden");
      if (key == "hidden") base.erase("heads");
      base[key] = value;
    } else {
      base[key] = value;
    }
  }
  return base;
}

namespace {
constexpr EnumName<Pass> kPassNames[] = {
    {Pass::Forward, "fwd"}, {Pass::Backward, "bwd"}, {Pass::ForwardBackward, "fwd+bwd"}};
}  // namespace

std::string_view to_string(Pass pass) { return name_of(kPassNames, pass, "fwd"); }

std::optional<Pass> parse_pass(std::string_view text) { return value_of(kPassNames, text); }

double flops_factor(Pass pass) { return pass == Pass::Forward ? 1.0 : pass == Pass::Backward ? 2.5 : 3.5; }

SweepSpec parse_suite(const Json& suite, const std::string& source) {
  check_keys(
      suite, source, "",
      {"name",   "description", "backends", "dtype",    "batch",    "tokens_per_batch", "seq",          "seq_kv",
       "model",  "heads",       "kv_heads", "head_dim", "hidden",   "causal",           "pass",         "generator",
       "layout", "window",      "seed",     "timing",   "accuracy", "backend_options",  "kernel_config"});
  SweepSpec spec;
  if (suite.contains("name")) {
    spec.name = string_list(suite["name"], source, "name").front();
    // The name becomes part of the default output directory, results/<name>-<time>: no path
    // separators, no "..", nothing a shell would need quoted.
    const bool plain = !spec.name.empty() && spec.name.size() <= 64 && spec.name.front() != '.' &&
                       std::all_of(spec.name.begin(), spec.name.end(), [](char c) {
                         return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.';
                       });
    if (!plain)
      bad(source, "name",
          fmt::format("= {} is not allowed: 1 to 64 letters, digits, '-', '_' or '.', not starting with '.'",
                      describe_value(suite["name"])));
  }
  if (suite.contains("description"))
    spec.description = string_list(suite["description"], source, "description", true).front();
  if (!suite.contains("backends")) bad(source, "backends", "is missing: name at least one backend");
  spec.backends = string_list(suite["backends"], source, "backends");
  if (suite.contains("dtype")) {
    spec.dtypes.clear();
    for (const auto& name : string_list(suite["dtype"], source, "dtype")) {
      const auto dtype = parse_dtype(name);
      if (!dtype) bad(source, "dtype", fmt::format("= '{}' is not a dtype; allowed: {}", name, kAllowedDTypes));
      spec.dtypes.push_back(*dtype);
    }
  }
  if (suite.contains("batch")) spec.batches = int_list(suite["batch"], source, "batch");
  if (suite.contains("tokens_per_batch"))
    spec.tokens_per_batch = int_list(suite["tokens_per_batch"], source, "tokens_per_batch").front();
  if (suite.contains("seq")) spec.seq_q = int_list(suite["seq"], source, "seq");
  if (suite.contains("seq_kv")) spec.seq_kv = int_list(suite["seq_kv"], source, "seq_kv");

  if (suite.contains("model")) {
    if (suite.contains("heads") || suite.contains("kv_heads") || suite.contains("head_dim") || suite.contains("hidden"))
      bad(source, "model", "cannot be combined with heads / kv_heads / head_dim / hidden: the model sets them");
    spec.heads.clear();
    for (const auto& name : string_list(suite["model"], source, "model")) {
      const auto& preset = find_model(name);
      spec.heads.push_back({preset.heads_q, preset.heads_kv, preset.head_dim, preset.name});
    }
  } else if (suite.contains("hidden")) {
    // hidden = heads × head_dim: one head count per head dim (the fa3-grid convention).
    if (suite.contains("heads")) bad(source, "hidden", "cannot be combined with heads: hidden / head_dim sets them");
    const int hidden = int_list(suite["hidden"], source, "hidden").front();
    const auto dims =
        suite.contains("head_dim") ? int_list(suite["head_dim"], source, "head_dim") : std::vector<int>{64};
    std::vector<int> kv_heads;
    if (suite.contains("kv_heads")) kv_heads = int_list(suite["kv_heads"], source, "kv_heads");
    if (static_cast<std::uint64_t>(dims.size()) * std::max<std::size_t>(kv_heads.size(), 1) > kMaxCases)
      bad(source, "head_dim",
          fmt::format("× kv_heads make {} head configurations; a sweep may hold at most {} cases",
                      static_cast<std::uint64_t>(dims.size()) * std::max<std::size_t>(kv_heads.size(), 1), kMaxCases));
    spec.heads.clear();
    for (int d : dims) {
      if (hidden % d != 0) bad(source, "hidden", fmt::format("= {} is not a multiple of head_dim {}", hidden, d));
      for (int kv : kv_heads.empty() ? std::vector<int>{hidden / d} : kv_heads)
        spec.heads.push_back({hidden / d, kv, d, ""});
    }
  } else if (suite.contains("heads") || suite.contains("kv_heads") || suite.contains("head_dim")) {
    const auto heads = suite.contains("heads") ? int_list(suite["heads"], source, "heads") : std::vector<int>{16};
    const auto dims =
        suite.contains("head_dim") ? int_list(suite["head_dim"], source, "head_dim") : std::vector<int>{64};
    std::vector<int> kv_heads;
    if (suite.contains("kv_heads")) kv_heads = int_list(suite["kv_heads"], source, "kv_heads");
    const std::uint64_t head_configs =
        static_cast<std::uint64_t>(heads.size()) * std::max<std::size_t>(kv_heads.size(), 1) * dims.size();
    if (head_configs > kMaxCases)
      bad(source, "heads",
          fmt::format("× kv_heads × head_dim make {} head configurations; a sweep may hold at most {} cases",
                      head_configs, kMaxCases));
    spec.heads.clear();
    for (int h : heads)
      for (int kv : kv_heads.empty() ? std::vector<int>{h} : kv_heads)
        for (int d : dims) spec.heads.push_back({h, kv, d, ""});
  }
  if (suite.contains("pass")) {
    spec.passes.clear();
    for (const auto& name : string_list(suite["pass"], source, "pass")) {
      const auto pass = parse_pass(name);
      if (!pass) bad(source, "pass", fmt::format("= '{}' is not a pass; allowed: fwd, bwd, fwd+bwd", name));
      if (std::find(spec.passes.begin(), spec.passes.end(), *pass) == spec.passes.end()) spec.passes.push_back(*pass);
    }
  }
  if (suite.contains("causal")) {
    spec.causal.clear();
    for (const auto& item : as_list(suite["causal"])) {
      if (!item.is_boolean())
        bad(source, "causal", fmt::format("must be true, false or a list of them, got {}", describe_value(item)));
      spec.causal.push_back(item.get<bool>());
    }
    if (spec.causal.empty()) bad(source, "causal", "is an empty list");
  }
  if (suite.contains("generator")) {
    spec.generators = string_list(suite["generator"], source, "generator");
  }
  if (suite.contains("layout")) {
    const auto layout = string_list(suite["layout"], source, "layout");
    if (layout.size() != 1 || (layout[0] != "bshd" && layout[0] != "bhsd"))
      bad(source, "layout", fmt::format("= {} is not allowed: one of bshd, bhsd", describe_value(suite["layout"])));
    spec.layout = layout[0] == "bshd" ? Layout::BSHD : Layout::BHSD;
  }
  if (suite.contains("window")) {
    const auto window = int_list(suite["window"], source, "window", -1);
    if (window.size() != 2) bad(source, "window", "must be [left, right] (-1 for unbounded)");
    spec.window_left = window[0];
    spec.window_right = window[1];
  }
  if (suite.contains("seed"))
    spec.seed =
        static_cast<std::uint64_t>(int_list(suite["seed"], source, "seed", 0, std::numeric_limits<int>::max()).front());
  if (suite.contains("timing")) {
    const auto& timing = suite["timing"];
    check_keys(
        timing, source, "timing",
        {"warmup", "warmup_ms", "min_reps", "max_reps", "noise", "min_time_ms", "max_time_ms", "timeout_ms", "cold"});
    auto& m = spec.timing.measure;
    if (timing.contains("warmup"))
      m.warmup_reps = int_list(timing["warmup"], source, "timing.warmup", 0, 1000000).front();
    if (timing.contains("warmup_ms")) m.warmup_ms = number_in(timing["warmup_ms"], source, "timing.warmup_ms", 0, 6e5);
    if (timing.contains("min_reps"))
      m.min_reps = int_list(timing["min_reps"], source, "timing.min_reps", 1, 1000000).front();
    if (timing.contains("max_reps"))
      m.max_reps = int_list(timing["max_reps"], source, "timing.max_reps", 1, 100000000).front();
    if (timing.contains("noise")) m.noise_target = number_in(timing["noise"], source, "timing.noise", 1e-6, 1.0);
    if (timing.contains("min_time_ms"))
      m.min_time_ms = number_in(timing["min_time_ms"], source, "timing.min_time_ms", 0, 3.6e6);
    if (timing.contains("max_time_ms"))
      m.max_time_ms = number_in(timing["max_time_ms"], source, "timing.max_time_ms", 0, 3.6e6);
    if (timing.contains("timeout_ms"))
      m.timeout_ms = number_in(timing["timeout_ms"], source, "timing.timeout_ms", 1, 3.6e7);
    if (timing.contains("cold")) {
      if (!timing["cold"].is_boolean()) bad(source, "timing.cold", "must be true or false");
      spec.timing.cold = timing["cold"].get<bool>();
    }
    if (m.max_reps < m.min_reps) bad(source, "timing.max_reps", "must be >= timing.min_reps");
  }
  if (suite.contains("accuracy")) {
    check_keys(suite["accuracy"], source, "accuracy", {"reference_gflop"});
    if (suite["accuracy"].contains("reference_gflop"))
      spec.reference_gflop =
          number_in(suite["accuracy"]["reference_gflop"], source, "accuracy.reference_gflop", 0, 1e6);
  }
  if (suite.contains("backend_options")) {
    const auto& options = suite["backend_options"];
    if (!options.is_object()) bad(source, "backend_options", "must be an object of option names to strings");
    for (const auto& [key, value] : options.items()) {
      if (!value.is_string())
        bad(source, "backend_options." + key, fmt::format("must be a string, got {}", describe_value(value)));
      spec.backend_options[key] = value.get<std::string>();
    }
  }
  if (suite.contains("kernel_config")) {
    const auto& configs = suite["kernel_config"];
    if (!configs.is_object()) bad(source, "kernel_config", "must be an object of backend names to kernel configs");
    for (const auto& [backend, value] : configs.items()) {
      if (std::find(spec.backends.begin(), spec.backends.end(), backend) == spec.backends.end())
        bad(source, "kernel_config." + backend,
            fmt::format("names a backend this sweep does not run; allowed: {}", fmt::join(spec.backends, ", ")));
      if (!value.is_string() || value.get<std::string>().empty())
        bad(source, "kernel_config." + backend,
            fmt::format("must be a kernel config name, got {}", describe_value(value)));
      spec.kernel_configs[backend] = value.get<std::string>();
    }
  }
  // batch = tokens_per_batch / seq, rounded down: fewer tokens than a sequence is no batch at all
  // (it used to run batch 1 without a word).
  if (spec.tokens_per_batch > 0) {
    const int longest = *std::max_element(spec.seq_q.begin(), spec.seq_q.end());
    if (spec.tokens_per_batch < longest)
      bad(source, "tokens_per_batch",
          fmt::format("= {} (--tokens) is fewer than seq {}: batch = tokens / seq would be 0; allowed: at least the "
                      "longest seq, {}",
                      spec.tokens_per_batch, longest, longest));
  }
  // Names are checked here so that a typo fails before the sweep starts.
  for (const auto& name : spec.generators) (void)find_generator(name);
  if (const std::uint64_t cases = case_count(spec); cases > kMaxCases)
    throw Error(ErrorKind::Usage, fmt::format("suite '{}': the axes make {} cases; a sweep may hold at most {}", source,
                                              cases, kMaxCases));
  return spec;
}

std::uint64_t case_count(const SweepSpec& spec) {
  const std::size_t sizes[] = {spec.generators.size(),
                               spec.dtypes.size(),
                               spec.heads.size(),
                               spec.causal.size(),
                               spec.seq_q.size(),
                               std::max<std::size_t>(spec.seq_kv.size(), 1),
                               spec.tokens_per_batch > 0 ? 1 : spec.batches.size(),
                               spec.backends.size(),
                               spec.passes.size()};
  std::uint64_t count = 1;
  for (const std::size_t size : sizes) {
    if (size == 0) return 0;
    // Saturates instead of wrapping: anything above kMaxCases is refused anyway.
    count = count > std::numeric_limits<std::uint64_t>::max() / size ? std::numeric_limits<std::uint64_t>::max()
                                                                     : count * size;
  }
  return count;
}

std::vector<Case> expand(const SweepSpec& spec) {
  const std::uint64_t count = case_count(spec);
  if (count > kMaxCases)
    throw Error(ErrorKind::Usage, fmt::format("sweep '{}': the axes make {} cases; a sweep may hold at most {}",
                                              spec.name, count, kMaxCases));
  std::vector<Case> cases;
  cases.reserve(static_cast<std::size_t>(count));
  for (const auto& generator : spec.generators)
    for (DType dtype : spec.dtypes)
      for (const auto& heads : spec.heads)
        for (bool causal : spec.causal)
          for (int seq_q : spec.seq_q)
            for (int seq_kv : spec.seq_kv.empty() ? std::vector<int>{seq_q} : spec.seq_kv)
              for (int batch :
                   spec.tokens_per_batch > 0 ? std::vector<int>{spec.tokens_per_batch / seq_q} : spec.batches)
                for (Pass pass : spec.passes)
                  for (const auto& backend : spec.backends) {
                    Case c;
                    c.pass = pass;
                    c.problem = {.batch = batch,
                                 .heads_q = heads.heads_q,
                                 .heads_kv = heads.heads_kv,
                                 .seq_q = seq_q,
                                 .seq_kv = seq_kv,
                                 .head_dim = heads.head_dim,
                                 .dtype = dtype,
                                 .layout = spec.layout,
                                 .causal = causal,
                                 .window_left = spec.window_left,
                                 .window_right = spec.window_right};
                    c.backend = backend;
                    c.generator = generator;
                    c.seed = spec.seed;
                    c.model = heads.model;
                    c.backend_options = spec.backend_options;
                    if (const auto config = spec.kernel_configs.find(backend); config != spec.kernel_configs.end())
                      c.kernel_config = config->second;
                    try {
                      c.problem.validate();
                    } catch (const Error& error) {
                      c.invalid_reason = error.what();
                    }
                    cases.push_back(std::move(c));
                  }
  return cases;
}

}  // namespace attnsuite::bench
