// `cudnn`: cuDNN's fused scaled-dot-product attention, forward and backward (its
// flash-attention engines), built through the cuDNN graph API with the header-only
// cudnn-frontend (PyPI nvidia-cudnn-frontend), the way PyTorch's cuDNN backend builds them.
//
// One graph per (device, problem, pass, tensor strides, LSE wanted, deterministic): building
// one — heuristics, then a plan that may compile a kernel at run time — costs milliseconds to
// seconds, so a plan builds the graphs of dense strides once (the forward's with LSE; for a
// plan made with PlanOptions::backward the backward's too; when supports() or
// supports_backward() has just built one to learn whether cuDNN takes the problem, the plan
// takes that one over) and a graph for other strides on the first run that passes them (outside
// the timed loop: the harness's accuracy run comes first).
// Our views are (batch, seq, heads, dim) with
// element strides; cuDNN's tensors are (batch, heads, seq, dim), so the strides are permuted,
// never the data: BSHD and BHSD both run without copies. GQA/MQA are native (K/V with fewer
// heads). The statistics output is cuDNN's natural-log LSE in float, (B, H, Sq, 1) dense — the
// memory of our (B, H, Sq) LSE view.
//
// The backward is the frontend's sdpa_backward: dQ, dK, dV from Q, K, V, O, dO and the
// forward's statistics, which it reads as the natural-log LSE the forward writes (the
// frontend's base-2 option, stats_use_log2, stays off in both), so BackwardArgs::lse is passed
// as it is. GQA/MQA are native here too (dK, dV with heads_kv heads, summed over the group by
// cuDNN); the mask is the forward's — causal and sliding windows as cuDNN's diagonal band
// (set_mask; bottom-right when seq_q != seq_kv, which cuDNN takes for seq_q <= seq_kv only, so
// no row is ever without a key). PlanOptions::deterministic sets
// the frontend's set_deterministic_algorithm; where cuDNN has no such engine for the problem
// the graph build refuses and so does plan().
//
// Workspace: the plan's workspace_bytes() (backward_workspace_bytes()) is the graph's
// workspace for dense strides of the problem's layout (with LSE), and the harness allocates
// it. A run whose graph needs more (other strides) allocates its workspace itself, through the
// tracking allocator, for that call.
//
// e4m3 (passed its GPU tests on the H100, 2026-12-06; CudnnFp8.*): Q, K, V e4m3 with their per-tensor descales go to
// the frontend's sdpa_fp8 (per-tensor scaling, as Transformer Engine uses it): descale_s = 1/448
// and scale_s = 448 (P in e4m3's range for P·V), scale_o = 1/descale_v (|O| <= max |V|, so O
// fits e4m3's ±448). On Hopper cuDNN writes O only in FP8 (bf16 O needs Blackwell and cuDNN
// 9.13) and takes bottom-right causal masks only on Blackwell, so this peer writes O in e4m3 into
// its workspace and widens it to bf16 into the caller's O in a second launch (timed with the
// forward: it is what a bf16 O costs with cuDNN on this GPU), and takes causal problems only
// square (where top-left is bottom-right). The six scales and the two amax outputs live in the
// workspace, written on the stream by a one-thread kernel (common/fp8_output.hpp).
//
// cuDNN handles are the backend's, one per device, shared by its plans; building and running a
// graph hold the backend's mutex (a handle is bound to the stream of the run that uses it).
#include "peers/cudnn/cudnn_sdpa.hpp"

#include <cuda_runtime_api.h>
#include <cudnn.h>
#include <cudnn_frontend.h>
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <iterator>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "attnsuite/error.hpp"
#include "cuda/common/backend_support.hpp"
#include "cuda/common/check.hpp"
#include "cuda/common/device_buffer.hpp"
#include "cuda/common/fp8_output.hpp"

namespace attnsuite::peers {
namespace {

namespace fe = cudnn_frontend;

// Tensor ids in the variant pack.
enum Uid : std::int64_t {
  kUidQ = 1,
  kUidK,
  kUidV,
  kUidO,
  kUidStats,
  kUidDO,
  kUidDQ,
  kUidDK,
  kUidDV,
  // e4m3's scale inputs and amax outputs, in the order of Fp8Scales.
  kUidDescaleQ,
  kUidDescaleK,
  kUidDescaleV,
  kUidDescaleS,
  kUidScaleS,
  kUidScaleO,
  kUidAmaxS,
  kUidAmaxO
};

// e4m3: the scale floats at the start of the extra workspace, in Uid order from kUidDescaleQ
// (six inputs, two amax outputs), then O in e4m3.
constexpr int kFp8ScaleFloats = 8;
constexpr std::int64_t kFp8ScalesBytes = 256;
constexpr float kE4m3Max = 448.0f;

void check_cudnn(cudnnStatus_t status, const char* call) {
  if (status == CUDNN_STATUS_SUCCESS) return;
  throw Error(ErrorKind::Device, fmt::format("cudnn: {} failed: {}", call, cudnnGetErrorString(status)));
}

// Thrown inside graph building; supports() turns it into its reason, plan() and a run into Unsupported.
void check_graph(fe::error_t status, const char* graph, const char* step) {
  if (status.is_good()) return;
  throw Error(ErrorKind::Unsupported, fmt::format("cuDNN SDPA {} {}: {}", graph, step, status.get_message()));
}

std::string cudnn_version_string() {
  const std::size_t version = cudnnGetVersion();  // 91900 for 9.19.0
  return fmt::format("{}.{}.{}", version / 10000, version / 100 % 100, version % 100);
}

using Strides = std::array<std::int64_t, 4>;

// Everything a graph depends on. A backward graph always reads the statistics (stats true);
// the gradient strides are zero in a forward key.
struct GraphKey {
  int device = 0;
  int batch = 0, heads_q = 0, heads_kv = 0, seq_q = 0, seq_kv = 0, head_dim = 0, head_dim_v = 0;
  DType dtype = DType::F16;
  bool causal = false;
  // The mask's band beside the diagonal (-1: unbounded): window_left, and window_right with causal
  // folded in (AttentionProblem::right_bound).
  int window_left = -1, right_bound = -1;
  float scale = 0.0f;
  bool stats = false;
  bool backward = false;
  bool deterministic = false;
  Strides q{}, k{}, v{}, o{};
  Strides d_o{}, dq{}, dk{}, dv{};
  friend bool operator==(const GraphKey&, const GraphKey&) = default;
};

struct GraphKeyHash {
  std::size_t operator()(const GraphKey& key) const {
    std::size_t seed = 0;
    auto mix = [&seed](auto value) {
      seed ^= std::hash<decltype(value)>{}(value) + 0x9e3779b97f4a7c15ull + (seed << 6) + (seed >> 2);
    };
    for (int value :
         {key.device, key.batch, key.heads_q, key.heads_kv, key.seq_q, key.seq_kv, key.head_dim, key.head_dim_v,
          static_cast<int>(key.dtype), static_cast<int>(key.causal), key.window_left, key.right_bound,
          static_cast<int>(key.stats), static_cast<int>(key.backward), static_cast<int>(key.deterministic)})
      mix(value);
    mix(key.scale);
    for (const Strides* strides : {&key.q, &key.k, &key.v, &key.o, &key.d_o, &key.dq, &key.dk, &key.dv})
      for (std::int64_t stride : *strides) mix(stride);
    return seed;
  }
};

// A built graph and the workspace it needs.
struct CachedGraph {
  std::shared_ptr<fe::graph::Graph> graph;
  std::int64_t workspace_bytes = 0;
};

// e4m3: the bytes before the graph's workspace — the scales, then O in e4m3 (dense in the
// problem's layout), 256-byte aligned; 0 for the 16-bit dtypes.
std::int64_t fp8_extra_bytes(const AttentionProblem& p) {
  if (p.dtype != DType::E4M3) return 0;
  const std::int64_t o_bytes = std::int64_t{p.batch} * p.seq_q * p.heads_q * p.dim_v();
  return kFp8ScalesBytes + (o_bytes + 255) / 256 * 256;
}

// The strides of O as the graph writes it: the caller's for the 16-bit dtypes, e4m3's dense
// buffer in the workspace (the problem's layout) for e4m3.
Strides graph_o_strides(const AttentionProblem& p, const Strides& caller) {
  if (p.dtype != DType::E4M3) return caller;
  return TensorView::dense_strides({p.batch, p.seq_q, p.heads_q, p.dim_v()}, p.layout);
}

// Our (b, s, h, d) element strides as cuDNN's (b, h, s, d).
std::vector<std::int64_t> cudnn_strides(const Strides& ours) { return {ours[0], ours[2], ours[1], ours[3]}; }

GraphKey key_for(const AttentionProblem& p, int device, const Strides& q, const Strides& k, const Strides& v,
                 const Strides& o, bool stats) {
  return {.device = device,
          .batch = p.batch,
          .heads_q = p.heads_q,
          .heads_kv = p.heads_kv,
          .seq_q = p.seq_q,
          .seq_kv = p.seq_kv,
          .head_dim = p.head_dim,
          .head_dim_v = p.dim_v(),
          .dtype = p.dtype,
          .causal = p.causal,
          .window_left = p.window_left,
          .right_bound = p.right_bound(),
          .scale = p.softmax_scale(),
          .stats = stats,
          .q = q,
          .k = k,
          .v = v,
          .o = o};
}

// The key of a backward graph: the forward's tensors with the statistics, dO like O and the
// gradients like their inputs.
GraphKey backward_key_for(const AttentionProblem& p, int device, const BackwardArgs& args, bool deterministic) {
  GraphKey key = key_for(p, device, args.q.strides, args.k.strides, args.v.strides, args.o.strides, true);
  key.backward = true;
  key.deterministic = deterministic;
  key.d_o = args.d_o.strides;
  key.dq = args.dq.strides;
  key.dk = args.dk.strides;
  key.dv = args.dv.strides;
  return key;
}

// The key for dense tensors in the problem's layout, with LSE: what the harness passes; for the
// backward, gradients and dO dense like Q, K, V and O.
GraphKey dense_key_for(const AttentionProblem& p, int device, bool backward = false, bool deterministic = false) {
  auto dense = [&](std::int64_t seq, std::int64_t heads, std::int64_t dim) {
    return TensorView::dense_strides({p.batch, seq, heads, dim}, p.layout);
  };
  GraphKey key =
      key_for(p, device, dense(p.seq_q, p.heads_q, p.head_dim), dense(p.seq_kv, p.heads_kv, p.head_dim),
              dense(p.seq_kv, p.heads_kv, p.dim_v()), graph_o_strides(p, dense(p.seq_q, p.heads_q, p.dim_v())), true);
  if (backward) {
    key.backward = true;
    key.deterministic = deterministic;
    key.d_o = key.o;
    key.dq = key.q;
    key.dk = key.k;
    key.dv = key.v;
  }
  return key;
}

// The mask of both passes as cuDNN's diagonal band. Row i keeps keys [diag − window_left, diag +
// window_right] with diag = i + seq_kv − seq_q (causal: window_right at most 0), the diagonal
// starting at the bottom-right corner — for square problems top-left is the same mask and the
// alignment more engines were built for. cuDNN keeps key j where j ≤ diag + right_bound and
// j + left_bound > diag: so right_bound = window_right and left_bound = window_left + 1. A left
// window alone sets no right bound (as passed its GPU tests on cuDNN 9.19); the frontend refuses
// that graph before cuDNN 9.10.2, and on 9.14.0 with seq_kv > 1024 (a cuDNN bug there), so the
// peer refuses such cases, through probe_support, with the frontend's reason.
template <class Attributes>
void set_mask(Attributes& options, const GraphKey& key) {
  if (key.right_bound < 0 && key.window_left < 0) return;
  options.set_diagonal_alignment(key.seq_q == key.seq_kv ? fe::DiagonalAlignment_t::TOP_LEFT
                                                         : fe::DiagonalAlignment_t::BOTTOM_RIGHT);
  if (key.right_bound >= 0) options.set_diagonal_band_right_bound(key.right_bound);
  if (key.window_left >= 0) options.set_diagonal_band_left_bound(key.window_left + 1);
}

CachedGraph build_graph(const GraphKey& key, cudnnHandle_t handle) {
  auto graph = std::make_shared<fe::graph::Graph>();
  const bool e4m3 = key.dtype == DType::E4M3;
  graph
      ->set_io_data_type(e4m3                      ? fe::DataType_t::FP8_E4M3
                         : key.dtype == DType::F16 ? fe::DataType_t::HALF
                                                   : fe::DataType_t::BFLOAT16)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  const std::int64_t b = key.batch, hq = key.heads_q, hkv = key.heads_kv, sq = key.seq_q, skv = key.seq_kv;
  const std::int64_t d = key.head_dim, dv = key.head_dim_v;
  auto tensor = [&](const char* name, Uid uid, std::int64_t heads, std::int64_t seq, std::int64_t dim,
                    const Strides& strides) {
    return graph->tensor(fe::graph::Tensor_attributes()
                             .set_name(name)
                             .set_uid(uid)
                             .set_dim({b, heads, seq, dim})
                             .set_stride(cudnn_strides(strides)));
  };
  // The statistics, cuDNN's (B, H, Sq, 1) float: the memory of our dense (B, H, Sq) LSE.
  const std::vector<std::int64_t> stats_dim{b, hq, sq, 1}, stats_stride{hq * sq, sq, 1, 1};
  // e4m3's descales, scales and amaxes: one float each.
  const std::vector<std::int64_t> scalar_shape{1, 1, 1, 1};
  // The float tensors (the statistics, e4m3's scalars) as inputs and as outputs.
  auto float_input = [&](const char* name, Uid uid, const std::vector<std::int64_t>& dim,
                         const std::vector<std::int64_t>& stride) {
    fe::graph::Tensor_attributes attributes;
    attributes.set_name(name).set_uid(uid).set_dim(dim).set_stride(stride).set_data_type(fe::DataType_t::FLOAT);
    return graph->tensor(attributes);
  };
  auto float_output = [](const std::shared_ptr<fe::graph::Tensor_attributes>& output, Uid uid,
                         const std::vector<std::int64_t>& dim, const std::vector<std::int64_t>& stride) {
    output->set_output(true).set_uid(uid).set_dim(dim).set_stride(stride).set_data_type(fe::DataType_t::FLOAT);
  };
  auto q = tensor("Q", kUidQ, hq, sq, d, key.q);
  auto k = tensor("K", kUidK, hkv, skv, d, key.k);
  auto v = tensor("V", kUidV, hkv, skv, dv, key.v);

  if (key.backward) {
    auto o = tensor("O", kUidO, hq, sq, dv, key.o);
    auto d_o = tensor("dO", kUidDO, hq, sq, dv, key.d_o);
    auto stats = float_input("Stats", kUidStats, stats_dim, stats_stride);
    auto options = fe::graph::SDPA_backward_attributes()
                       .set_name("attnsuite_sdpa_backward")
                       .set_attn_scale(key.scale)
                       .set_deterministic_algorithm(key.deterministic);
    set_mask(options, key);
    auto [dq, dk, dv_out] = graph->sdpa_backward(q, k, v, o, d_o, stats, options);
    dq->set_output(true).set_uid(kUidDQ).set_dim({b, hq, sq, d}).set_stride(cudnn_strides(key.dq));
    dk->set_output(true).set_uid(kUidDK).set_dim({b, hkv, skv, d}).set_stride(cudnn_strides(key.dk));
    dv_out->set_output(true).set_uid(kUidDV).set_dim({b, hkv, skv, dv}).set_stride(cudnn_strides(key.dv));
  } else if (e4m3) {
    auto scalar = [&](const char* name, Uid uid) { return float_input(name, uid, scalar_shape, scalar_shape); };
    auto options = fe::graph::SDPA_fp8_attributes()
                       .set_name("attnsuite_sdpa_fp8")
                       .set_generate_stats(key.stats)
                       .set_attn_scale(key.scale);
    set_mask(options, key);
    auto [o, stats, amax_s, amax_o] =
        graph->sdpa_fp8(q, k, v, scalar("Descale_Q", kUidDescaleQ), scalar("Descale_K", kUidDescaleK),
                        scalar("Descale_V", kUidDescaleV), scalar("Descale_S", kUidDescaleS),
                        scalar("Scale_S", kUidScaleS), scalar("Scale_O", kUidScaleO), options);
    o->set_output(true)
        .set_uid(kUidO)
        .set_dim({b, hq, sq, dv})
        .set_stride(cudnn_strides(key.o))
        .set_data_type(fe::DataType_t::FP8_E4M3);
    for (auto& [amax, uid] : {std::pair{amax_s, kUidAmaxS}, std::pair{amax_o, kUidAmaxO}})
      float_output(amax, uid, scalar_shape, scalar_shape);
    if (key.stats) float_output(stats, kUidStats, stats_dim, stats_stride);
  } else {
    auto options =
        fe::graph::SDPA_attributes().set_name("attnsuite_sdpa").set_generate_stats(key.stats).set_attn_scale(key.scale);
    set_mask(options, key);
    auto [o, stats] = graph->sdpa(q, k, v, options);
    o->set_output(true).set_uid(kUidO).set_dim({b, hq, sq, dv}).set_stride(cudnn_strides(key.o));
    if (key.stats) float_output(stats, kUidStats, stats_dim, stats_stride);
  }

  const char* what = key.backward ? "backward graph" : "graph";
  check_graph(graph->validate(), what, "validation");
  check_graph(graph->build_operation_graph(handle), what, "operation graph");
  check_graph(graph->create_execution_plans({fe::HeurMode_t::A}), what, "heuristics");
  check_graph(graph->check_support(handle), what, "support check");
  check_graph(graph->build_plans(handle), what, "plan build");
  CachedGraph cached;
  cached.graph = std::move(graph);
  check_graph(cached.graph->get_workspace_size(cached.workspace_bytes), what, "workspace size");
  return cached;
}

class CudnnSdpaBackend;

// A graph key with the graph built for it.
struct KeyedGraph {
  GraphKey key;
  CachedGraph graph;
};

// One problem's graphs: the dense forward one (its workspace is the plan's), for a backward plan
// the dense backward one (its workspace is backward_workspace_bytes()), and those of other
// strides its runs were given.
class CudnnSdpaPlan final : public KernelPlan {
 public:
  CudnnSdpaPlan(const CudnnSdpaBackend& backend, const AttentionProblem& problem, KeyedGraph dense,
                std::optional<KeyedGraph> dense_backward)
      : backend_(backend), problem_(problem), dense_(std::move(dense)), dense_backward_(std::move(dense_backward)) {}

  std::string_view kernel_config() const override { return {}; }
  // e4m3: the scales and O in e4m3 first (fp8_extra_bytes), then the graph's workspace.
  std::size_t workspace_bytes() const override {
    return static_cast<std::size_t>(fp8_extra_bytes(problem_) + dense_.graph.workspace_bytes);
  }
  std::size_t backward_workspace_bytes() const override {
    return dense_backward_ ? static_cast<std::size_t>(dense_backward_->graph.workspace_bytes) : 0;
  }
  RunReport forward(const AttentionArgs& args, Stream stream) override;
  RunReport backward(const BackwardArgs& args, Stream stream) override;

 private:
  void forward_e4m3(const AttentionArgs& args, cudaStream_t stream);
  // Runs the graph of `key` on the tensors of `pack`; `workspace` (null or the harness's) holds
  // `provided` bytes. Translates cudnn-frontend's own exceptions into Error(Device).
  void execute(const GraphKey& key, std::unordered_map<std::int64_t, void*> pack, void* workspace,
               std::int64_t provided, cudaStream_t stream);
  // The graph for `key`: a dense one, else one of this plan's, built on first use. Throws
  // Error(Unsupported) with cuDNN's reason when it refuses. Under the backend's mutex.
  const CachedGraph& graph_for(const GraphKey& key);

  const CudnnSdpaBackend& backend_;
  AttentionProblem problem_;
  KeyedGraph dense_;
  std::optional<KeyedGraph> dense_backward_;
  std::unordered_map<GraphKey, CachedGraph, GraphKeyHash> graphs_;
};

class CudnnSdpaBackend final : public IdentifiedBackend {
 public:
  CudnnSdpaBackend()
      : IdentifiedBackend(
            {"cudnn",
             fmt::format("cuDNN SDPA (cuDNN {} fused flash attention)", cudnn_version_string()),
             {DeviceType::Cuda, 0},
             "fp16/bf16 (and e4m3 in with per-tensor descales, bf16 out: sdpa_fp8), head dims <= 256 and multiples of "
             "8 (d_v too), causal and sliding windows (a bottom-right diagonal band; seq_q <= seq_kv; not with e4m3), "
             "GQA/MQA, BSHD/BHSD via strides, LSE; backward (sdpa_backward graph; cuDNN's head-dim limits, "
             "deterministic option); sm80+; one graph per shape, pass and strides",
             "cuDNN"}) {}
  ~CudnnSdpaBackend() override {
    for (auto& [device, handle] : handles_) {
      if (cudaSetDevice(device) == cudaSuccess) cudnnDestroy(handle);
    }
  }
  CudnnSdpaBackend(const CudnnSdpaBackend&) = delete;
  CudnnSdpaBackend& operator=(const CudnnSdpaBackend&) = delete;

  // Whether cuDNN takes a problem is known only by building its graph: the answer is kept per
  // graph key, and the graph built for it is kept for the next plan of that key.
  Support supports(const AttentionProblem& problem) const override {
    try {
      problem.validate();
    } catch (const Error& error) {
      return Support::no(error.what());
    }
    if (problem.dtype == DType::E4M3) {
      // cuDNN's FP8 SDPA (sdpa_fp8) on sm_90: head dims multiples of 16 up to 256, and (bottom-right
      // causal being Blackwell's) causal only where top-left is the same mask.
      for (int dim : {problem.head_dim, problem.dim_v()}) {
        if (dim > 256 || dim % 16 != 0)
          return Support::no(
              fmt::format("head dim {} not supported by cuDNN's FP8 SDPA; allowed: multiples of 16 up to 256", dim));
      }
      if (problem.causal && problem.seq_q != problem.seq_kv) {
        return Support::no(
            fmt::format("causal e4m3 with seq_q {} != seq_kv {}: cuDNN's FP8 SDPA takes bottom-right causal masks on "
                        "Blackwell only; on Hopper square causal problems only",
                        problem.seq_q, problem.seq_kv));
      }
    } else if (problem.dtype != DType::F16 && problem.dtype != DType::BF16) {
      return Support::no("cudnn SDPA needs fp16, bf16 or e4m3");
    }
    for (int dim : {problem.head_dim, problem.dim_v()}) {
      if (dim > 256 || dim % 8 != 0) {
        return Support::no(fmt::format(
            "head dim {} not supported by cudnn SDPA; allowed: multiples of 8 up to 256 (head_dim and head_dim_v)",
            dim));
      }
    }
    const bool windowed = problem.window_left >= 0 || problem.window_right >= 0;
    if (windowed && problem.dtype == DType::E4M3)
      return Support::no("sliding window with e4m3 not supported by the cudnn peer (cuDNN's FP8 SDPA: causal only)");
    if ((problem.causal || windowed) && problem.seq_q > problem.seq_kv) {
      return Support::no(fmt::format(
          "{} with seq_q {} > seq_kv {} not supported by cuDNN {} SDPA: its bottom-right diagonal band needs "
          "seq_q <= seq_kv",
          windowed ? "sliding window" : "causal", problem.seq_q, problem.seq_kv, cudnn_version_string()));
    }
    Support device_support = cuda::supports_device(name());
    if (!device_support) return device_support;
    return probe_support(problem, /*backward=*/false);
  }

  // cuDNN's backward graph has limits of its own (head dims up to 128 before Hopper, no
  // seq_q = seq_kv = 1, ...): known, again, by building the graph (non-deterministic; a
  // deterministic plan builds its own and may still be refused).
  Support supports_backward(const AttentionProblem& problem) const override {
    if (problem.dtype == DType::E4M3)
      return Support::no(
          "e4m3 has no backward here: e4m3 inputs are for inference (the peer runs FP8 SDPA forward only)");
    const Support forward = supports(problem);
    if (!forward) return forward;
    return probe_support(problem, /*backward=*/true);
  }

  std::unique_ptr<KernelPlan> plan(const AttentionProblem& problem, const PlanOptions& options) const override {
    require_support(*this, problem);
    choose_kernel_config(*this, problem, options);  // refuses a config: there is none
    const int device = current_device();
    std::lock_guard lock(mutex_);
    KeyedGraph dense{dense_key_for(problem, device), {}};
    dense.graph = take(dense.key);
    std::optional<KeyedGraph> dense_backward;
    if (options.backward) {
      dense_backward.emplace();
      dense_backward->key = dense_key_for(problem, device, /*backward=*/true, options.deterministic);
      dense_backward->graph = take(dense_backward->key);
    }
    return std::make_unique<CudnnSdpaPlan>(*this, problem, std::move(dense), std::move(dense_backward));
  }

  std::mutex& mutex() const { return mutex_; }

  static int current_device() {
    int device = 0;
    ATTNSUITE_CUDA_CHECK(cudaGetDevice(&device));
    return device;
  }

  // The handle of a device, made on first use there. Callers hold mutex().
  cudnnHandle_t handle_for(int device) const {
    auto found = handles_.find(device);
    if (found != handles_.end()) return found->second;
    cudnnHandle_t handle = nullptr;
    check_cudnn(cudnnCreate(&handle), "cudnnCreate");
    handles_.emplace(device, handle);
    return handle;
  }

  // The graph for `key`; throws Error(Unsupported) with cuDNN's reason when it refuses (and
  // remembers the refusal). Callers hold mutex().
  CachedGraph build(const GraphKey& key) const {
    if (const auto refused = refusals_.find(key); refused != refusals_.end())
      throw Error(ErrorKind::Unsupported, refused->second);
    try {
      return build_graph(key, handle_for(key.device));
    } catch (const Error& error) {
      if (error.kind() == ErrorKind::Unsupported) refusals_.emplace(key, error.what());
      throw;
    }
  }

 private:
  // Whether cuDNN builds the dense graph of the pass for `problem` on the current device.
  Support probe_support(const AttentionProblem& problem, bool backward) const {
    try {
      const GraphKey key = dense_key_for(problem, current_device(), backward);
      std::lock_guard lock(mutex_);
      probe(key);
    } catch (const std::exception& error) {
      return Support::no(error.what());
    }
    return Support::yes();
  }

  // The graph of `key`: the one probe() left in spare_, else a new one (Error(Unsupported) when
  // cuDNN refuses). Callers hold mutex_.
  CachedGraph take(const GraphKey& key) const {
    auto spare = spare_.find(key);
    if (spare == spare_.end()) return build(key);
    CachedGraph graph = std::move(spare->second);
    spare_.erase(spare);
    return graph;
  }

  // Builds the graph of `key` unless its answer is known; a built one waits in spare_ for the
  // plan that follows. Callers hold mutex_.
  void probe(const GraphKey& key) const {
    if (accepted_.contains(key)) return;
    CachedGraph graph = build(key);  // throws (and remembers) a refusal
    accepted_.insert(key);
    spare_.emplace(key, std::move(graph));
  }

  mutable std::mutex mutex_;
  mutable std::unordered_map<int, cudnnHandle_t> handles_;
  // cuDNN's answer per graph key, a fact about the installed cuDNN and the GPU; refusals are
  // kept too, since a refused build costs as much as a good one.
  mutable std::unordered_map<GraphKey, std::string, GraphKeyHash> refusals_;
  mutable std::unordered_set<GraphKey, GraphKeyHash> accepted_;
  // Graphs supports() built, until a plan of their key takes them.
  mutable std::unordered_map<GraphKey, CachedGraph, GraphKeyHash> spare_;
};

// The engines move Q/K/V/O (and dO, dQ, dK, dV) with 16-byte vector loads and TMA; the frontend
// checks the strides against that alignment but not the pointers.
void require_aligned(std::initializer_list<const void*> pointers, const char* names) {
  for (const void* data : pointers) {
    if (reinterpret_cast<std::uintptr_t>(data) % 16 != 0)
      throw Error(ErrorKind::Unsupported, fmt::format("cudnn: {} must start 16-byte aligned", names));
  }
}

RunReport CudnnSdpaPlan::forward(const AttentionArgs& args, Stream stream) {
  cuda::check_cuda_args(backend_.name(), problem_, args);
  if (problem_.dtype == DType::E4M3) {
    forward_e4m3(args, static_cast<cudaStream_t>(stream));
    return {};
  }
  require_aligned({args.q.data, args.k.data, args.v.data, args.o.data}, "Q, K, V and O");
  const int device = CudnnSdpaBackend::current_device();
  const bool stats = !args.lse.empty();
  std::unordered_map<std::int64_t, void*> pack{
      {kUidQ, args.q.data}, {kUidK, args.k.data}, {kUidV, args.v.data}, {kUidO, args.o.data}};
  if (stats) pack.emplace(kUidStats, args.lse.data);
  execute(key_for(problem_, device, args.q.strides, args.k.strides, args.v.strides, args.o.strides, stats),
          std::move(pack), args.workspace, dense_.graph.workspace_bytes, static_cast<cudaStream_t>(stream));
  return {};
}

void CudnnSdpaPlan::forward_e4m3(const AttentionArgs& args, cudaStream_t stream) {
  require_aligned({args.q.data, args.k.data, args.v.data, args.o.data}, "Q, K, V and O");
  for (const auto& [view, name] : {std::pair{&args.q, "q"}, std::pair{&args.k, "k"}, std::pair{&args.v, "v"}}) {
    if (!(view->descale > 0.0f) || !std::isfinite(view->descale))
      throw Error(ErrorKind::Usage,
                  fmt::format("cudnn: e4m3 {} has descale {}; allowed: finite and > 0", name, view->descale));
  }
  const int device = CudnnSdpaBackend::current_device();
  const bool stats = !args.lse.empty();
  // The scales and O in e4m3 at the start of the workspace (the harness's, else one of our own
  // for this call), the graph's workspace after them.
  const std::int64_t extra = fp8_extra_bytes(problem_);
  cuda::DeviceBuffer own;
  auto* workspace = static_cast<unsigned char*>(args.workspace);
  if (workspace == nullptr) {
    own = cuda::DeviceBuffer(static_cast<std::size_t>(extra));
    workspace = static_cast<unsigned char*>(own.data());
  }
  auto* scales = reinterpret_cast<float*>(workspace);
  auto* o8 = workspace + kFp8ScalesBytes;
  cuda::DeviceFloats values;
  values.count = kFp8ScaleFloats;
  const float inputs[kFp8ScaleFloats] = {args.q.descale, args.k.descale,        args.v.descale, 1.0f / kE4m3Max,
                                         kE4m3Max,       1.0f / args.v.descale, 0.0f,           0.0f};
  std::copy(std::begin(inputs), std::end(inputs), values.values);
  cuda::write_floats_async(scales, values, stream);

  std::unordered_map<std::int64_t, void*> pack{
      {kUidQ, args.q.data}, {kUidK, args.k.data}, {kUidV, args.v.data}, {kUidO, o8}};
  for (int i = 0; i < kFp8ScaleFloats; ++i) pack.emplace(kUidDescaleQ + i, scales + i);
  if (stats) pack.emplace(kUidStats, args.lse.data);
  const Strides o8_strides = graph_o_strides(problem_, args.o.strides);
  execute(key_for(problem_, device, args.q.strides, args.k.strides, args.v.strides, o8_strides, stats), std::move(pack),
          args.workspace != nullptr ? workspace + extra : nullptr,
          args.workspace != nullptr ? dense_.graph.workspace_bytes : 0, stream);

  // O = O_e4m3 / scale_o = O_e4m3 · descale_v, into the caller's bf16 O.
  cuda::E4m3Widening widening;
  widening.in = o8;
  widening.out = args.o.data;
  widening.scale = scales + 2;
  for (int i = 0; i < 4; ++i) {
    widening.in_strides[i] = o8_strides[i];
    widening.out_strides[i] = args.o.strides[i];
    widening.shape[i] = args.o.shape[i];
  }
  cuda::widen_e4m3_to_bf16_async(widening, stream);
  if (own.data() != nullptr) ATTNSUITE_CUDA_CHECK(cudaStreamSynchronize(stream));
}

RunReport CudnnSdpaPlan::backward(const BackwardArgs& args, Stream stream) {
  if (!dense_backward_) return KernelPlan::backward(args, stream);  // throws: not a backward plan
  cuda::check_cuda_backward_args(backend_.name(), problem_, args);
  require_aligned(
      {args.q.data, args.k.data, args.v.data, args.o.data, args.d_o.data, args.dq.data, args.dk.data, args.dv.data},
      "Q, K, V, O, dO, dQ, dK and dV");
  const int device = CudnnSdpaBackend::current_device();
  std::unordered_map<std::int64_t, void*> pack{
      {kUidQ, args.q.data},   {kUidK, args.k.data},    {kUidV, args.v.data},
      {kUidO, args.o.data},   {kUidDO, args.d_o.data}, {kUidStats, args.lse.data},
      {kUidDQ, args.dq.data}, {kUidDK, args.dk.data},  {kUidDV, args.dv.data}};
  execute(backward_key_for(problem_, device, args, dense_backward_->key.deterministic), std::move(pack), args.workspace,
          dense_backward_->graph.workspace_bytes, static_cast<cudaStream_t>(stream));
  return {};
}

const CachedGraph& CudnnSdpaPlan::graph_for(const GraphKey& key) {
  if (key == dense_.key) return dense_.graph;
  if (dense_backward_ && key == dense_backward_->key) return dense_backward_->graph;
  auto found = graphs_.find(key);
  if (found == graphs_.end()) found = graphs_.emplace(key, backend_.build(key)).first;
  return found->second;
}

void CudnnSdpaPlan::execute(const GraphKey& key, std::unordered_map<std::int64_t, void*> pack, void* workspace,
                            std::int64_t provided, cudaStream_t stream) {
  try {
    std::lock_guard lock(backend_.mutex());
    const CachedGraph& cached = graph_for(key);
    cudnnHandle_t handle = backend_.handle_for(key.device);
    check_cudnn(cudnnSetStream(handle, stream), "cudnnSetStream");

    // The harness's workspace covers the dense-strides graph; a graph that needs more gets its
    // own buffer for this call (tracked, and freed only after the stream has finished with it).
    cuda::DeviceBuffer own_workspace;
    if (cached.workspace_bytes > (workspace != nullptr ? provided : 0)) {
      own_workspace = cuda::DeviceBuffer(static_cast<std::size_t>(cached.workspace_bytes));
      workspace = own_workspace.data();
    }
    fe::error_t status = cached.graph->execute(handle, pack, workspace);
    if (status.is_bad()) {
      throw Error(ErrorKind::Device, fmt::format("cudnn: SDPA {}execution failed: {}", key.backward ? "backward " : "",
                                                 status.get_message()));
    }
    if (own_workspace.data() != nullptr) ATTNSUITE_CUDA_CHECK(cudaStreamSynchronize(stream));
  } catch (const Error&) {
    throw;
  } catch (const std::exception& error) {  // cudnn-frontend's own exceptions
    throw Error(ErrorKind::Device, fmt::format("cudnn: {}", error.what()));
  }
}

}  // namespace

std::unique_ptr<Backend> make_cudnn_sdpa_backend() { return std::make_unique<CudnnSdpaBackend>(); }

std::string cudnn_version() { return cudnn_version_string(); }

}  // namespace attnsuite::peers
