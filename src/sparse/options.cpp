#include "sparse/options.hpp"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "attnsuite/error.hpp"

namespace attnsuite::sparse {

std::vector<std::string> SparseOptions::keys(bool predicted) {
  if (predicted) return {"sparse_config", "sparse_config_json"};
  return {"block_mask"};
}

SparseOptions SparseOptions::parse(const std::map<std::string, std::string>& options, bool predicted) {
  SparseOptions parsed;
  const auto find = [&](const char* key) -> const std::string* {
    const auto found = options.find(key);
    return found == options.end() ? nullptr : &found->second;
  };
  if (!predicted) {
    if (const std::string* value = find("block_mask")) {
      // Checked against a small problem so that a bad spec fails before any case runs.
      AttentionProblem probe;
      probe.head_dim = 128;
      probe.seq_q = probe.seq_kv = 256;
      if (value->rfind("file:", 0) != 0)
        (void)make_block_mask(*value, probe, block_shape_for(128));
      else if (value->size() <= 5)
        throw Error(ErrorKind::Usage, "bad block mask 'file:'; needs a path: file:PATH");
      parsed.mask_spec = *value;
    }
    return parsed;
  }
  if (const std::string* value = find("sparse_config_json")) {  // the tuner's candidates, without a file
    const nlohmann::json document = nlohmann::json::parse(*value, nullptr, false);
    if (document.is_discarded()) throw Error(ErrorKind::Usage, "sparse_config_json is not valid JSON");
    parsed.config = document.is_object() && document.contains("layers")
                        ? config_from_json(document, "sparse_config_json")
                        : SparseConfig{true, {head_settings_from_json(document, "sparse_config_json")}};
    parsed.config_path = "(inline)";
  } else if (const std::string* path = find("sparse_config"); path && !path->empty()) {
    parsed.config = load_config(*path);  // throws Error(Usage) naming the file and the reason
    parsed.config_path = *path;
  }
  return parsed;
}

Support SparseOptions::supports(const AttentionProblem& problem, bool predicted) const {
  if (predicted && config.heads.size() != 1 && static_cast<int>(config.heads.size()) != problem.heads_q)
    return Support::no(fmt::format("sparse config '{}' has settings for {} heads; the problem has {} q heads",
                                   config_path, config.heads.size(), problem.heads_q));
  return Support::yes();
}

}  // namespace attnsuite::sparse
