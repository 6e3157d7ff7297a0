// The table of flash2's alternative configurations (each defined in its config_*.cu).
#include "cuda/flash2/configs.hpp"

namespace attnsuite::cuda::flash2 {

extern const AlternativeConfig kM64D64;
extern const AlternativeConfig kM64D128;

AlternativeConfigs alternative_configs() {
  static const AlternativeConfig table[] = {kM64D64, kM64D128};
  return {table, sizeof(table) / sizeof(table[0])};
}

}  // namespace attnsuite::cuda::flash2
