// Model presets: the attention shapes of well-known models, in one table.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace attnsuite {

struct ModelPreset {
  std::string name;
  int hidden = 0;
  int heads_q = 0;
  int heads_kv = 0;
  int head_dim = 0;
  std::string note;
};

const std::vector<ModelPreset>& model_presets();
// Throws Error(Usage): "unknown model 'x'; available: headline, llama-3.2-1b, ...".
const ModelPreset& find_model(std::string_view name);

}  // namespace attnsuite
