#include "ring/lse_merge.hpp"

namespace attnsuite::ring {

void merge_partials(float* acc_o, float* acc_lse, const float* part_o, const float* part_lse, std::int64_t rows,
                    int dv) {
  for (std::int64_t r = 0; r < rows; ++r) merge_row(acc_o + r * dv, acc_lse + r, part_o + r * dv, part_lse[r], dv);
}

}  // namespace attnsuite::ring
