// The ONNX Runtime peers through the harness's Runner, as `attnsuite bench` runs them: accuracy
// against the fp64 reference, memory seen, unsupported problems skipped with their reason.
// Skipped where onnxruntime cannot be imported by the embedded Python.
#include <gtest/gtest.h>

#if ATTNSUITE_HAVE_ONNXRUNTIME_PEER

#include "bench/plan.hpp"
#include "bench/runner.hpp"
#include "peers/onnxruntime/onnxruntime_peer.hpp"

namespace attnsuite {
namespace {

bench::SweepSpec ort_spec() {
  bench::SweepSpec spec;
  spec.backends = {"onnxruntime", "onnxruntime-decomposed"};
  spec.dtypes = {DType::F32, DType::F16, DType::BF16};
  spec.batches = {2};
  spec.seq_q = {80};
  spec.seq_kv = {80, 112};
  spec.heads = {bench::HeadConfig{8, 2, 64, ""}};
  spec.causal = {false, true};
  spec.timing.measure.warmup_reps = 0;
  spec.timing.measure.min_reps = 2;
  spec.timing.measure.max_time_ms = 20;
  spec.timing.cold = false;
  return spec;
}

TEST(OnnxRuntimePeer, RunsInTheHarnessAgainstTheReference) {
  Registry registry;
  onnxruntime::register_onnxruntime_backends(registry);
  const Support here = registry.find("onnxruntime").supports(AttentionProblem{});
  if (!here) GTEST_SKIP() << here.reason;
  EXPECT_EQ(registry.find("onnxruntime").display_name(), "ONNX Runtime (CPU EP)");
  EXPECT_EQ(registry.find("onnxruntime").peer_of(), "ONNX Runtime");
  EXPECT_FALSE(onnxruntime::onnxruntime_version().empty());

  const bench::SweepSpec spec = ort_spec();
  bench::Runner runner(spec, registry);
  int ok = 0;
  for (const auto& c : bench::expand(spec)) {
    const auto row = runner.run(c);
    ASSERT_TRUE(row.has_value());
    SCOPED_TRACE(c.backend + " " + c.problem.describe());
    if (c.problem.dtype == DType::BF16) {
      EXPECT_EQ(row->status, bench::CaseStatus::Skipped);
      EXPECT_NE(row->reason.find("bfloat16"), std::string::npos) << row->reason;
      continue;
    }
    ASSERT_EQ(row->status, bench::CaseStatus::Ok) << row->reason;
    EXPECT_LT(*row->rel_l2, c.problem.dtype == DType::F32 ? 1e-5 : 2e-3);
    EXPECT_EQ(*row->accuracy_fraction, 1.0);
    // The output buffer at least (2·80·8·64 elements), counted by the tracker.
    EXPECT_GE(*row->peak_mem_mib * 1048576.0, 2.0 * 80 * 8 * 64 * size_of(c.problem.dtype));
    EXPECT_GT(*row->ms_median, 0.0);
    ++ok;
  }
  EXPECT_EQ(ok, 2 * 2 * 2 * 2);  // backends x fp32/fp16 x seq_kv x causal
}

TEST(OnnxRuntimePeer, RowsWithoutKeysAreUnsupported) {
  Registry registry;
  onnxruntime::register_onnxruntime_backends(registry);
  AttentionProblem p;
  p.seq_q = 64;
  p.seq_kv = 32;
  p.causal = true;  // bottom-right: the first 32 query rows see no key
  const Support support = registry.find("onnxruntime-decomposed").supports(p);
  EXPECT_FALSE(support);
  EXPECT_NE(support.reason.find("sees no key"), std::string::npos) << support.reason;
}

}  // namespace
}  // namespace attnsuite

#endif
