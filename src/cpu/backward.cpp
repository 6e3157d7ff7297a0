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
  const std::int64_t b = problem.batch, hq = problem.heads_q, hkv = problem.heads_kv;
  const std::int64_t nq = problem.seq_q, nk = problem.seq_kv;
  const std::int64_t d = problem.head_dim, dv = problem.dim_v();
  const DType dtype = problem.dtype;
  check_view(backend, "q", args.q, {b, nq, hq, d}, dtype, contiguous_last_dim);
  check_view(backend, "k", args.k, {b, nk, hkv, d}, dtype, contiguous_last_dim);
  check_view(backend, "v", args.v, {b, nk, hkv, dv}, dtype, contiguous_last_dim);
  check_view(backend, "o", args.o, {b, nq, hq, dv}, dtype, contiguous_last_dim);
  check_view(backend, "d_o", args.d_o, {b, nq, hq, dv}, dtype, contiguous_last_dim);
  check_view(backend, "dq", args.dq, {b, nq, hq, d}, dtype, contiguous_last_dim);
  check_view(backend, "dk", args.dk, {b, nk, hkv, d}, dtype, contiguous_last_dim);
  check_view(backend, "dv", args.dv, {b, nk, hkv, dv}, dtype, contiguous_last_dim);
  ATTNSUITE_CHECK(!args.lse.empty(), ErrorKind::Usage,
                  fmt::format("{}: lse is missing; the backward needs the forward's log-sum-exp", backend));
  ATTNSUITE_CHECK(
      args.lse.device.type == DeviceType::Cpu, ErrorKind::Unsupported,
      fmt::format("{}: lse is on the {}, this backend runs on the CPU", backend, to_string(args.lse.device.type)));
}

}  // namespace attnsuite::cpu
