#include "cpu/backward.hpp"

#include <fmt/format.h>

#include "attnsuite/error.hpp"
#include "cpu/common.hpp"

namespace attnsuite::cpu {

void check_backward_args(std::string_view backend, const AttentionProblem& problem, const BackwardArgs& args,
                         bool contiguous_last_dim) {
  problem.validate();
  if (const Support dtype = supports_backward_dtype(problem); !dtype)
    throw Error(ErrorKind::Unsupported, fmt::format("{}: {}", backend, dtype.reason));
  const ViewShapes shape = view_shapes(problem);
  const DType dtype = problem.dtype;
  check_view(backend, "q", args.q, shape.q, dtype, contiguous_last_dim);
  check_view(backend, "k", args.k, shape.k, dtype, contiguous_last_dim);
  check_view(backend, "v", args.v, shape.v, dtype, contiguous_last_dim);
  check_view(backend, "o", args.o, shape.o, dtype, contiguous_last_dim);
  check_view(backend, "d_o", args.d_o, shape.o, dtype, contiguous_last_dim);
  check_view(backend, "dq", args.dq, shape.q, dtype, contiguous_last_dim);
  check_view(backend, "dk", args.dk, shape.k, dtype, contiguous_last_dim);
  check_view(backend, "dv", args.dv, shape.v, dtype, contiguous_last_dim);
  ATTNSUITE_CHECK(!args.lse.empty(), ErrorKind::Usage,
                  fmt::format("{}: lse is missing; the backward needs the forward's log-sum-exp", backend));
  ATTNSUITE_CHECK(
      args.lse.device.type == DeviceType::Cpu, ErrorKind::Unsupported,
      fmt::format("{}: lse is on the {}, this backend runs on the CPU", backend, to_string(args.lse.device.type)));
}

}  // namespace attnsuite::cpu
