#include "core/presets.hpp"

#include <fmt/format.h>

#include "attnsuite/error.hpp"

namespace attnsuite {

const std::vector<ModelPreset>& model_presets() {
  // Head counts and dims from each model's published config.json.
  static const std::vector<ModelPreset> presets = {
      {"headline", 1024, 16, 16, 64, "the suite's headline table: batch 32, seq 1024, fp16"},
      {"llama-3.2-1b", 2048, 32, 8, 64, "GQA 4:1"},
      {"llama-3.1-8b", 4096, 32, 8, 128, "GQA 4:1"},
      {"llama-3.1-70b", 8192, 64, 8, 128, "GQA 8:1"},
      {"mistral-7b", 4096, 32, 8, 128, "GQA 4:1"},
      {"qwen2.5-7b", 3584, 28, 4, 128, "GQA 7:1"},
      {"gemma-2-9b", 3584, 16, 8, 256, "GQA 2:1, head dim 256"},
      // Not one model's config: the attention shape of the video diffusion transformers (24 heads
      // of 128 over hidden 3072, full attention over 16k-32k spatio-temporal tokens).
      {"video-dit", 3072, 24, 24, 128, "video diffusion transformer shape: 24 heads x d128, non-causal, long N"},
  };
  return presets;
}

const ModelPreset& find_model(std::string_view name) {
  for (const auto& preset : model_presets())
    if (preset.name == name) return preset;
  std::string names;
  for (const auto& preset : model_presets()) names += (names.empty() ? "" : ", ") + preset.name;
  throw Error(ErrorKind::Usage, fmt::format("unknown model '{}'; available: {}", name, names));
}

}  // namespace attnsuite
