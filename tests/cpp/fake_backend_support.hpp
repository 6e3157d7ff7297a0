// For fake backends in tests: their output written from the fp64 reference, optionally off by a
// known amount, so that a test controls exactly how right a "kernel" is.
#pragma once

#include <cstddef>
#include <vector>

#include "attnsuite/attnsuite.hpp"
#include "core/reference.hpp"

namespace attnsuite::testing_support {

// O and (where args.lse is set) the LSE of every (batch, q head) from the fp64 reference, O
// times `o_factor` and the LSE plus `lse_shift`.
inline void write_reference_output(const AttentionProblem& p, const AttentionArgs& args, double o_factor = 1.0,
                                   double lse_shift = 0.0) {
  std::vector<double> out(static_cast<std::size_t>(p.seq_q) * p.dim_v()), lse(p.seq_q);
  for (int b = 0; b < p.batch; ++b)
    for (int h = 0; h < p.heads_q; ++h) {
      cpu::reference_head_f64(p, args, b, h, out.data(), lse.data());
      for (int s = 0; s < p.seq_q; ++s) {
        for (int d = 0; d < p.dim_v(); ++d)
          store_from_float(args.o.data, p.dtype, args.o.offset(b, s, h, d),
                           static_cast<float>(out[s * p.dim_v() + d] * o_factor));
        if (!args.lse.empty())
          args.lse.data[(static_cast<std::size_t>(b) * p.heads_q + h) * p.seq_q + s] =
              static_cast<float>(lse[s] + lse_shift);
      }
    }
}

}  // namespace attnsuite::testing_support
