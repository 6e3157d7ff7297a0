// The host side of `ring`: NCCL communicators over the visible GPUs of this process
// (ncclCommInitAll), the buffers of each rank, and the schedule's loop, driven by one host
// thread that enqueues every rank's work (NCCL's single-thread, several-device usage: each
// step's sends and receives of all ranks in one ncclGroupStart/ncclGroupEnd).
//
// Streams and events per rank r (device r):
//   compute[r]: scatter of its chunks, the local kernels and merges, the final rounding/gather;
//   comm[r]:    ncclSend of the block at hand to r+1 and ncclRecv of the next block from r−1.
// Step s: comm[r] waits for compute_done[r] (the compute of step s−1 read the buffer now being
// received into), then sends `current` and receives into `next`; compute[r] runs the pairs of
// step s on `current`, records compute_done[r], then waits for the receive before step s+1.
// The harness's stream (device 0) waits for every rank's compute at the end, so its event timer
// spans the whole ring, scatter and gather included.
#include "ring/cuda/ring.hpp"

#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "attnsuite/error.hpp"
#include "cuda/common/backend_support.hpp"
#include "cuda/common/check.hpp"
#include "cuda/common/device_buffer.hpp"
#include "cuda/cuda_backends.hpp"
#include "cuda/flash2/flash2.hpp"
#include "ring/communicator.hpp"
#include "ring/cuda/merge.hpp"
#include "ring/cuda/nccl_library.hpp"
#include "ring/schedule.hpp"
#if ATTNSUITE_HAVE_FLASH3
#include "cuda/flash3/flash3.hpp"
#endif

namespace attnsuite::cuda {

namespace {

namespace ar = ::attnsuite::ring;
using ring_kernels::launch_init;
using ring_kernels::launch_merge;
using ring_kernels::launch_round;

// NCCL's entry points, loaded on first use (nccl_library.hpp); supports() has said why not
// before anything here runs without it.
const nccl::Api& nccl_api() {
  std::string reason;
  const nccl::Api* api = nccl::load(&reason);
  if (api == nullptr) throw Error(ErrorKind::Unsupported, fmt::format("ring: {}", reason));
  return *api;
}

void check_nccl(ncclResult_t status, const char* call) {
  if (status == ncclSuccess) return;
  const nccl::Api& api = nccl_api();
  const char* last = api.last_error(nullptr);
  throw Error(ErrorKind::Device, fmt::format("{} failed: {} ({})", call, api.error_string(status), last ? last : ""));
}
#define ATTNSUITE_NCCL_CHECK(call) check_nccl((call), #call)

// One GPU of the ring: its device, NCCL communicator, streams and events.
struct RankDevice {
  int device = 0;
  ncclComm_t comm = nullptr;
  cudaStream_t compute = nullptr, comm_stream = nullptr;
  cudaEvent_t compute_done = nullptr, recv_done = nullptr, finished = nullptr;
};

// The NCCL ring of W GPUs (devices 0..W−1), made once per W and kept.
class NcclRing {
 public:
  explicit NcclRing(int world) : ranks_(static_cast<std::size_t>(world)) {
    // NVLink SHARP (multicast) stays off on the shared machines unless the user set it
    // (the device README: it needs a fabric manager setup they do not have).
    setenv("NCCL_NVLS_ENABLE", "0", /*overwrite=*/0);
    std::vector<int> devices(static_cast<std::size_t>(world));
    std::vector<ncclComm_t> comms(static_cast<std::size_t>(world));
    for (int r = 0; r < world; ++r) devices[static_cast<std::size_t>(r)] = r;
    ATTNSUITE_NCCL_CHECK(nccl_api().comm_init_all(comms.data(), world, devices.data()));
    for (int r = 0; r < world; ++r) {
      RankDevice& rank = ranks_[static_cast<std::size_t>(r)];
      rank.device = r;
      rank.comm = comms[static_cast<std::size_t>(r)];
      ATTNSUITE_CUDA_CHECK(cudaSetDevice(r));
      ATTNSUITE_CUDA_CHECK(cudaStreamCreateWithFlags(&rank.compute, cudaStreamNonBlocking));
      ATTNSUITE_CUDA_CHECK(cudaStreamCreateWithFlags(&rank.comm_stream, cudaStreamNonBlocking));
      for (cudaEvent_t* event : {&rank.compute_done, &rank.recv_done, &rank.finished})
        ATTNSUITE_CUDA_CHECK(cudaEventCreateWithFlags(event, cudaEventDisableTiming));
    }
  }
  // Statuses are not reported here: the backend in the global registry is destroyed after
  // main() returns, when the CUDA runtime may already be unloading (every call then fails with
  // cudaErrorCudartUnloading and the driver frees everything with the context anyway).
  ~NcclRing() {
    for (RankDevice& rank : ranks_) {
      if (cudaSetDevice(rank.device) != cudaSuccess) continue;
      if (rank.compute) cudaStreamSynchronize(rank.compute);
      if (rank.comm_stream) cudaStreamSynchronize(rank.comm_stream);
      for (cudaEvent_t event : {rank.compute_done, rank.recv_done, rank.finished})
        if (event) cudaEventDestroy(event);
      if (rank.compute) cudaStreamDestroy(rank.compute);
      if (rank.comm_stream) cudaStreamDestroy(rank.comm_stream);
      if (rank.comm) nccl_api().comm_destroy(rank.comm);
    }
    cudaGetLastError();
  }
  NcclRing(const NcclRing&) = delete;
  NcclRing& operator=(const NcclRing&) = delete;

  int world() const { return static_cast<int>(ranks_.size()); }
  RankDevice& rank(int r) { return ranks_[static_cast<std::size_t>(r)]; }
  // Held while one forward enqueues its work: the plans that share the ring share its streams
  // and events.
  std::mutex& enqueue_mutex() { return enqueue_mutex_; }

 private:
  std::vector<RankDevice> ranks_;
  std::mutex enqueue_mutex_;
};

// The communicator of one rank: sends and receives on its comm stream; wait_exchange makes the
// compute stream wait for the receive (on the device, the host never blocks). The caller brackets
// all ranks' start_exchange calls of one step with ncclGroupStart/ncclGroupEnd.
class NcclCommunicator final : public ar::RingCommunicator {
 public:
  NcclCommunicator(RankDevice& device, int rank, int world) : device_(device), rank_(rank), world_(world) {}
  int rank() const override { return rank_; }
  int world() const override { return world_; }
  void start_exchange(const void* send, std::size_t send_bytes, void* recv, std::size_t recv_bytes) override {
    ATTNSUITE_CUDA_CHECK(cudaStreamWaitEvent(device_.comm_stream, device_.compute_done, 0));
    const nccl::Api& api = nccl_api();
    ATTNSUITE_NCCL_CHECK(
        api.send(send, send_bytes, ncclUint8, (rank_ + 1) % world_, device_.comm, device_.comm_stream));
    ATTNSUITE_NCCL_CHECK(
        api.recv(recv, recv_bytes, ncclUint8, (rank_ + world_ - 1) % world_, device_.comm, device_.comm_stream));
  }
  void wait_exchange() override {
    ATTNSUITE_CUDA_CHECK(cudaSetDevice(device_.device));
    ATTNSUITE_CUDA_CHECK(cudaEventRecord(device_.recv_done, device_.comm_stream));
    ATTNSUITE_CUDA_CHECK(cudaStreamWaitEvent(device_.compute, device_.recv_done, 0));
  }
  void abort() override { nccl_api().comm_abort(device_.comm); }

 private:
  RankDevice& device_;
  int rank_, world_;
};

// The buffers of one rank for one problem shape.
struct RankBuffers {
  DeviceBuffer q[2];  // its query chunks, dense (B, L, Hq, D)
  // K/V blocks, each [K lo | K hi | V lo | V hi]: block[0] holds the rank's own block and is
  // never received into (so resident inputs survive a forward); blocks 1 and 2 take turns
  // receiving the next block while the current one is computed on.
  DeviceBuffer block[3];
  DeviceBuffer part_o, part_lse, acc_o[2], acc_lse[2], workspace;
  std::unique_ptr<Backend> kernel;  // the local kernel, on this rank's device (outlives its plans)
  // The local kernel's plan of each block pair problem of this rank (a handful: diagonal and
  // full pairs of the two chunk lengths).
  std::vector<std::pair<AttentionProblem, std::unique_ptr<KernelPlan>>> plans;
  KernelPlan& plan_for(const AttentionProblem& problem) {
    for (auto& [known, plan] : plans)
      if (known == problem) return *plan;
    throw Error(ErrorKind::Internal, "ring: no local plan for a block pair");
  }
};

enum class Mode { Full, ComputeOnly, CommOnly };

// The ring's options (PlanOptions::options): ring_world, ring_mode, ring_inputs.
struct RingOptions {
  int world = 0;  // 0: every visible GPU
  Mode mode = Mode::Full;
  bool resident = false;

  // Error(Usage) naming the allowed values for a bad one.
  static RingOptions parse(const std::map<std::string, std::string>& options) {
    RingOptions parsed;
    if (const auto found = options.find("ring_world"); found != options.end()) {
      const std::string& value = found->second;
      int world = 0;
      const auto [end, error] = std::from_chars(value.data(), value.data() + value.size(), world);
      if (error != std::errc() || end != value.data() + value.size() || world < 1)
        throw Error(ErrorKind::Usage, fmt::format("ring: ring_world '{}' is not allowed: 1..visible GPUs", value));
      parsed.world = world;
    }
    if (const auto found = options.find("ring_mode"); found != options.end()) {
      const std::string& value = found->second;
      if (value == "full")
        parsed.mode = Mode::Full;
      else if (value == "compute-only")
        parsed.mode = Mode::ComputeOnly;
      else if (value == "comm-only")
        parsed.mode = Mode::CommOnly;
      else
        throw Error(ErrorKind::Usage,
                    fmt::format("ring: ring_mode '{}' is not allowed: full, compute-only, comm-only", value));
    }
    if (const auto found = options.find("ring_inputs"); found != options.end()) {
      const std::string& value = found->second;
      if (value != "scatter" && value != "resident")
        throw Error(ErrorKind::Usage, fmt::format("ring: ring_inputs '{}' is not allowed: scatter, resident", value));
      parsed.resident = value == "resident";
    }
    return parsed;
  }
};

// One rank's K/V block in the problem's dtype: offsets and size in bytes.
using BlockLayout = ar::KvBlockLayout;
BlockLayout block_layout(const ar::RingSchedule& schedule, const AttentionProblem& p, int rank) {
  return ar::kv_block_layout(schedule, rank, p.batch, p.heads_kv, p.head_dim, p.dim_v(),
                             static_cast<std::int64_t>(size_of(p.dtype)));
}

TensorView dense(void* data, DType dtype, int device, std::int64_t b, std::int64_t s, std::int64_t h, std::int64_t d) {
  TensorView view;
  view.data = data;
  view.dtype = dtype;
  view.device = {DeviceType::Cuda, device};
  view.shape = {b, s, h, d};
  view.strides = TensorView::dense_strides(view.shape, Layout::BSHD);
  return view;
}

// Tokens [begin, begin + length) of a dense BSHD tensor of `seq` tokens, copied between it and
// a dense (batch, length, ...) buffer: one 2-D copy (rows = batches). cudaMemcpyDefault: the
// pointers say which devices (unified addressing), peer-to-peer where the GPUs allow.
void copy_tokens(void* dst, std::int64_t dst_seq, const void* src, std::int64_t src_seq, std::int64_t begin_dst,
                 std::int64_t begin_src, std::int64_t length, std::int64_t token_bytes, std::int64_t batch,
                 cudaStream_t stream) {
  ATTNSUITE_CUDA_CHECK(cudaMemcpy2DAsync(
      static_cast<char*>(dst) + begin_dst * token_bytes, static_cast<std::size_t>(dst_seq * token_bytes),
      static_cast<const char*>(src) + begin_src * token_bytes, static_cast<std::size_t>(src_seq * token_bytes),
      static_cast<std::size_t>(length * token_bytes), static_cast<std::size_t>(batch), cudaMemcpyDefault, stream));
}

AttentionProblem pair_problem(const ar::RingSchedule& schedule, const AttentionProblem& p, const ar::ChunkPair& pair) {
  AttentionProblem sub = p;
  sub.seq_q = static_cast<int>(schedule.chunk_length(pair.q_chunk));
  sub.seq_kv = static_cast<int>(schedule.chunk_length(pair.kv_chunk));
  sub.causal = pair.kind == ar::PairKind::Diagonal;  // square: top-left = bottom-right aligned
  sub.scale = p.softmax_scale();
  return sub;
}

// The kernel of the block pairs on the current device: flash3 on sm_90, else flash2.
std::unique_ptr<Backend> make_local_kernel() {
#if ATTNSUITE_HAVE_FLASH3
  if (supports_hopper("flash3").ok) return make_flash3_backend();
#endif
  return make_flash2_backend();
}

// The plans' NCCL ring, made on the first forward that needs it and kept for the next plans of
// the same world size (ncclCommInitAll costs far more than a forward). A ring over another world
// size replaces it; plans still running on the old one keep it alive.
class RingCache {
 public:
  std::shared_ptr<NcclRing> get(int world) {
    std::lock_guard lock(mutex_);
    if (!ring_ || ring_->world() != world) {
      ring_.reset();
      ring_ = std::make_shared<NcclRing>(world);
    }
    return ring_;
  }

 private:
  std::mutex mutex_;
  std::shared_ptr<NcclRing> ring_;
};

// One problem's ring: the buffers of each rank, the local kernel's plans, and the inputs the
// last forward scattered.
class RingPlan final : public KernelPlan {
 public:
  RingPlan(RingCache& rings, const AttentionProblem& problem, RingOptions options, int world,
           const KernelConfigCache* kernel_cache)
      : rings_(rings), problem_(problem), options_(options), world_(world), kernel_cache_(kernel_cache) {}

  std::string_view kernel_config() const override { return {}; }

  RunReport forward(const AttentionArgs& args, Stream stream) override {
    const AttentionProblem& problem = problem_;
    check_cuda_args("ring", problem, args);
    for (const TensorView* view : {&args.q, &args.k, &args.v, &args.o})
      ATTNSUITE_CHECK(view->is_dense() && view->strides == TensorView::dense_strides(view->shape, Layout::BSHD),
                      ErrorKind::Unsupported, "ring: Q, K, V and O must be dense BSHD");
    int caller_device = 0;
    ATTNSUITE_CUDA_CHECK(cudaGetDevice(&caller_device));
    if (!ring_) ring_ = rings_.get(world_);
    std::lock_guard lock(ring_->enqueue_mutex());
    const ar::RingSchedule schedule(world_, problem.seq_q);
    const bool first = buffers_.empty();
    if (first) allocate(schedule, problem);
    // Resident inputs (option ring_inputs=resident, for the scaling benchmark): the ranks' Q
    // chunks and own K/V blocks of the last forward are reused when Q, K, V are the same buffers
    // (the harness's timed repetitions), so the time is the ring's alone; the plan's first
    // forward (a case's accuracy run) always scatters. A caller that rewrites its inputs in place
    // between forwards must not use it. Default: scatter every forward.
    const bool scatter =
        !options_.resident || first || args.q.data != last_q_ || args.k.data != last_k_ || args.v.data != last_v_;
    last_q_ = args.q.data;
    last_k_ = args.k.data;
    last_v_ = args.v.data;

    cudaEvent_t inputs_ready = nullptr;
    ATTNSUITE_CUDA_CHECK(cudaSetDevice(caller_device));
    ATTNSUITE_CUDA_CHECK(cudaEventCreateWithFlags(&inputs_ready, cudaEventDisableTiming));
    try {
      ATTNSUITE_CUDA_CHECK(cudaEventRecord(inputs_ready, static_cast<cudaStream_t>(stream)));
      run(schedule, problem, args, inputs_ready, scatter);
      // The caller's stream waits for every rank.
      ATTNSUITE_CUDA_CHECK(cudaSetDevice(caller_device));
      for (int r = 0; r < world_; ++r)
        ATTNSUITE_CUDA_CHECK(cudaStreamWaitEvent(static_cast<cudaStream_t>(stream), ring_->rank(r).finished, 0));
    } catch (...) {
      cudaSetDevice(caller_device);
      cudaEventDestroy(inputs_ready);
      throw;
    }
    ATTNSUITE_CUDA_CHECK(cudaSetDevice(caller_device));
    ATTNSUITE_CUDA_CHECK_NOTHROW(cudaEventDestroy(inputs_ready));
    return {};
  }

 private:
  // Each rank's buffers and local plans, on its device.
  void allocate(const ar::RingSchedule& schedule, const AttentionProblem& p) {
    buffers_.clear();
    const int world = schedule.world();
    std::int64_t largest_block = 0, longest = 0;
    for (int r = 0; r < world; ++r) largest_block = std::max(largest_block, block_layout(schedule, p, r).size);
    for (int c = 0; c < schedule.chunks(); ++c) longest = std::max(longest, schedule.chunk_length(c));
    const std::int64_t element = static_cast<std::int64_t>(size_of(p.dtype));
    std::vector<RankBuffers> buffers(static_cast<std::size_t>(world));
    for (int r = 0; r < world; ++r) {
      ATTNSUITE_CUDA_CHECK(cudaSetDevice(r));
      RankBuffers& b = buffers[static_cast<std::size_t>(r)];
      b.kernel = make_local_kernel();
      const auto chunks = schedule.chunks_of(r);
      for (int i = 0; i < 2; ++i) {
        const std::int64_t length = schedule.chunk_length(chunks[i]);
        b.q[i] = DeviceBuffer(static_cast<std::size_t>(p.batch * length * p.heads_q * p.head_dim * element));
        b.acc_o[i] = DeviceBuffer(static_cast<std::size_t>(p.batch * length * p.heads_q * p.dim_v()) * sizeof(float));
        b.acc_lse[i] = DeviceBuffer(static_cast<std::size_t>(p.batch * p.heads_q * length) * sizeof(float));
      }
      for (DeviceBuffer& block : b.block) {
        block = DeviceBuffer(static_cast<std::size_t>(largest_block));
        // Zeros: the compute-only mode reads other ranks' block extents from the own block.
        ATTNSUITE_CUDA_CHECK(cudaMemset(block.data(), 0, block.bytes()));
      }
      b.part_o = DeviceBuffer(static_cast<std::size_t>(p.batch * longest * p.heads_q * p.dim_v() * element));
      b.part_lse = DeviceBuffer(static_cast<std::size_t>(p.batch * p.heads_q * longest) * sizeof(float));
      PlanOptions local;
      local.kernel_cache = kernel_cache_;
      local.cuda_device = r;
      std::size_t workspace = 0;
      for (int step = 0; step < world; ++step)
        for (const ar::ChunkPair& pair : schedule.pairs(r, step, p.causal)) {
          const AttentionProblem sub = pair_problem(schedule, p, pair);
          if (std::any_of(b.plans.begin(), b.plans.end(), [&](const auto& known) { return known.first == sub; }))
            continue;
          std::unique_ptr<KernelPlan> plan = b.kernel->plan(sub, local);
          workspace = std::max(workspace, plan->workspace_bytes());
          b.plans.emplace_back(sub, std::move(plan));
        }
      if (workspace > 0) b.workspace = DeviceBuffer(workspace);
    }
    buffers_ = std::move(buffers);
  }

  void run(const ar::RingSchedule& schedule, const AttentionProblem& p, const AttentionArgs& args,
           cudaEvent_t inputs_ready, bool scatter) {
    const int world = schedule.world();
    const std::int64_t element = static_cast<std::int64_t>(size_of(p.dtype));
    const std::int64_t q_token = static_cast<std::int64_t>(p.heads_q) * p.head_dim * element;
    const std::int64_t k_token = static_cast<std::int64_t>(p.heads_kv) * p.head_dim * element;
    const std::int64_t v_token = static_cast<std::int64_t>(p.heads_kv) * p.dim_v() * element;
    const std::int64_t o_token = static_cast<std::int64_t>(p.heads_q) * p.dim_v() * element;
    std::vector<std::unique_ptr<ar::RingCommunicator>> comms;
    std::vector<int> current(static_cast<std::size_t>(world), 0);  // which block buffer is current
    const auto receive_into = [](int cur) { return cur == 1 ? 2 : 1; };

    // Scatter (or not) and reset the accumulators.
    for (int r = 0; r < world; ++r) {
      RankDevice& rank = ring_->rank(r);
      RankBuffers& b = buffers_[static_cast<std::size_t>(r)];
      comms.push_back(std::make_unique<NcclCommunicator>(rank, r, world));
      ATTNSUITE_CUDA_CHECK(cudaSetDevice(r));
      ATTNSUITE_CUDA_CHECK(cudaStreamWaitEvent(rank.compute, inputs_ready, 0));
      const auto chunks = schedule.chunks_of(r);
      const BlockLayout own = block_layout(schedule, p, r);
      char* block = static_cast<char*>(b.block[0].data());
      for (int i = 0; i < 2; ++i) {
        const std::int64_t begin = schedule.chunk_begin(chunks[i]), length = schedule.chunk_length(chunks[i]);
        if (scatter) {
          copy_tokens(b.q[i].data(), length, args.q.data, p.seq_q, 0, begin, length, q_token, p.batch, rank.compute);
          copy_tokens(block + own.k_offset[i], length, args.k.data, p.seq_kv, 0, begin, length, k_token, p.batch,
                      rank.compute);
          copy_tokens(block + own.v_offset[i], length, args.v.data, p.seq_kv, 0, begin, length, v_token, p.batch,
                      rank.compute);
        }
        launch_init(b.acc_o[i].as<float>(), b.acc_lse[i].as<float>(), p.batch * p.heads_q * length, p.dim_v(),
                    rank.compute);
      }
      ATTNSUITE_CUDA_CHECK(cudaEventRecord(rank.compute_done, rank.compute));
    }
    for (int step = 0; step < world; ++step) {
      const bool exchange = step + 1 < world && options_.mode != Mode::ComputeOnly;
      if (exchange) {
        ATTNSUITE_NCCL_CHECK(nccl_api().group_start());
        for (int r = 0; r < world; ++r) {
          RankBuffers& b = buffers_[static_cast<std::size_t>(r)];
          const int cur = current[static_cast<std::size_t>(r)];
          const BlockLayout sending = block_layout(schedule, p, schedule.kv_source(r, step));
          const BlockLayout receiving = block_layout(schedule, p, schedule.kv_source(r, step + 1));
          ATTNSUITE_CUDA_CHECK(cudaSetDevice(r));
          comms[static_cast<std::size_t>(r)]->start_exchange(
              b.block[cur].data(), static_cast<std::size_t>(sending.size), b.block[receive_into(cur)].data(),
              static_cast<std::size_t>(receiving.size));
        }
        ATTNSUITE_NCCL_CHECK(nccl_api().group_end());
      }
      for (int r = 0; r < world; ++r) {
        RankDevice& rank = ring_->rank(r);
        RankBuffers& b = buffers_[static_cast<std::size_t>(r)];
        ATTNSUITE_CUDA_CHECK(cudaSetDevice(r));
        if (options_.mode != Mode::CommOnly) {
          const int source = schedule.kv_source(r, step);
          const BlockLayout block = block_layout(schedule, p, source);
          const auto mine = schedule.chunks_of(r);
          const auto theirs = schedule.chunks_of(source);
          char* data = static_cast<char*>(b.block[current[static_cast<std::size_t>(r)]].data());
          for (const ar::ChunkPair& pair : schedule.pairs(r, step, p.causal)) {
            const int qi = pair.q_chunk == mine[0] ? 0 : 1;
            const int ki = pair.kv_chunk == theirs[0] ? 0 : 1;
            const AttentionProblem sub = pair_problem(schedule, p, pair);
            AttentionArgs local;
            local.q = dense(b.q[qi].data(), p.dtype, r, p.batch, sub.seq_q, p.heads_q, p.head_dim);
            local.k = dense(data + block.k_offset[ki], p.dtype, r, p.batch, sub.seq_kv, p.heads_kv, p.head_dim);
            local.v = dense(data + block.v_offset[ki], p.dtype, r, p.batch, sub.seq_kv, p.heads_kv, p.dim_v());
            local.o = dense(b.part_o.data(), p.dtype, r, p.batch, sub.seq_q, p.heads_q, p.dim_v());
            local.lse = {b.part_lse.as<float>(), Device{DeviceType::Cuda, r}};
            local.workspace = b.workspace.data();
            b.plan_for(sub).forward(local, rank.compute);
            launch_merge(b.acc_o[qi].as<float>(), b.acc_lse[qi].as<float>(), b.part_o.data(), b.part_lse.as<float>(),
                         p.dtype, p.batch, sub.seq_q, p.heads_q, p.dim_v(), rank.compute);
          }
        }
        ATTNSUITE_CUDA_CHECK(cudaEventRecord(rank.compute_done, rank.compute));
        if (exchange) {
          comms[static_cast<std::size_t>(r)]->wait_exchange();
          current[static_cast<std::size_t>(r)] = receive_into(current[static_cast<std::size_t>(r)]);
        }
      }
    }
    for (int r = 0; r < world; ++r) {
      RankDevice& rank = ring_->rank(r);
      RankBuffers& b = buffers_[static_cast<std::size_t>(r)];
      ATTNSUITE_CUDA_CHECK(cudaSetDevice(r));
      const auto chunks = schedule.chunks_of(r);
      for (int i = 0; i < 2; ++i) {
        const std::int64_t begin = schedule.chunk_begin(chunks[i]), length = schedule.chunk_length(chunks[i]);
        const std::int64_t count = p.batch * length * p.heads_q * p.dim_v();
        // Rounded once into part_o (free now), then to the caller's O at the chunk's tokens.
        launch_round(b.part_o.data(), b.acc_o[i].as<float>(), p.dtype, count, rank.compute);
        copy_tokens(args.o.data, p.seq_q, b.part_o.data(), length, begin, 0, length, o_token, p.batch, rank.compute);
        if (!args.lse.empty())
          copy_tokens(args.lse.data, p.seq_q, b.acc_lse[i].data(), length, begin, 0, length, sizeof(float),
                      static_cast<std::int64_t>(p.batch) * p.heads_q, rank.compute);
      }
      ATTNSUITE_CUDA_CHECK(cudaEventRecord(rank.finished, rank.compute));
    }
  }

  RingCache& rings_;
  AttentionProblem problem_;
  RingOptions options_;
  int world_;
  const KernelConfigCache* kernel_cache_;
  std::shared_ptr<NcclRing> ring_;
  std::vector<RankBuffers> buffers_;
  const void *last_q_ = nullptr, *last_k_ = nullptr, *last_v_ = nullptr;
};

class RingBackend final : public IdentifiedBackend {
 public:
  RingBackend()
      : IdentifiedBackend({"ring",
                           "Ring attention over the visible GPUs (attnsuite; NCCL, zigzag, flash3/flash2 blocks)",
                           {DeviceType::Cuda, 0},
                           "fp16/bf16, context parallel over W GPUs (option ring_world; default all visible), NCCL "
                           "send/recv overlapped with the local kernel, zigzag causal, GQA/MQA, BSHD, "
                           "seq_q == seq_kv >= 2W, no window"}) {}
  std::vector<std::string> option_keys() const override { return {"ring_world", "ring_mode", "ring_inputs"}; }
  void check_options(const std::map<std::string, std::string>& options) const override {
    (void)RingOptions::parse(options);
  }

  // Over every visible GPU (the default ring_world).
  Support supports(const AttentionProblem& problem) const override { return supports(problem, 0); }

  std::unique_ptr<KernelPlan> plan(const AttentionProblem& problem, const PlanOptions& options) const override {
    const RingOptions ring_options = RingOptions::parse(options.options);
    const Support support = supports(problem, ring_options.world);
    if (!support) throw Error(ErrorKind::Unsupported, fmt::format("ring: {}", support.reason));
    choose_kernel_config(*this, problem, options);  // refuses a config: there is none
    return std::make_unique<RingPlan>(rings_, problem, ring_options, effective_world(ring_options.world),
                                      options.kernel_cache);
  }

 private:
  // `world_option`: ring_world, 0 for every visible GPU.
  Support supports(const AttentionProblem& problem, int world_option) const {
    if (Support common = supports_problem_common(name(), problem); !common) return common;
    if (Support device = supports_device(name()); !device) return device;
    // NCCL is loaded here, the first time ring is asked about on a GPU machine.
    if (std::string reason; nccl::load(&reason) == nullptr) return Support::no(fmt::format("ring: {}", reason));
    // The ring spreads itself over GPUs 0..W−1 from GPU 0; a --gpus worker on another GPU (or
    // a launcher's process on its local rank) must not start a second ring over the same GPUs.
    if (int current = 0; cudaGetDevice(&current) == cudaSuccess && current != 0)
      return Support::no(
          fmt::format("ring: runs from GPU 0 over the visible GPUs; the current GPU is {} "
                      "(run ring without --gpus, and one process per node)",
                      current));
    if (problem.seq_q != problem.seq_kv)
      return Support::no(fmt::format("ring: seq_q {} != seq_kv {}; the ring shards one sequence (needs Nq = Nk)",
                                     problem.seq_q, problem.seq_kv));
    if (problem.window_left >= 0 || problem.window_right >= 0)
      return Support::no("ring: sliding windows are not supported by the ring schedule");
    if (problem.layout != Layout::BSHD) return Support::no("ring: layout bhsd not supported; needs bshd");
    const int world = effective_world(world_option);
    if (world < 1)
      return Support::no(fmt::format("ring: ring_world {} but {} GPUs visible", world_option, cuda_device_count()));
    if (const std::string refusal = ar::ring_refusal(world, problem.seq_q); !refusal.empty())
      return Support::no(refusal);
    // The local kernel must take every block pair: chunks of ⌊N/2W⌋ and ⌈N/2W⌉ tokens.
    AttentionProblem chunk = problem;
    chunk.seq_q = chunk.seq_kv = static_cast<int>(problem.seq_q / (2 * world));
    chunk.causal = true;
    const auto kernel = make_local_kernel();
    if (Support local = kernel->supports(chunk); !local)
      return Support::no(fmt::format("ring: local kernel {}: {}", kernel->name(), local.reason));
    return Support::yes();
  }

  static int effective_world(int world_option) {
    const int visible = cuda_device_count();
    if (world_option == 0) return visible;
    return world_option <= visible ? world_option : -1;
  }

  mutable RingCache rings_;
};

}  // namespace

std::unique_ptr<Backend> make_ring_backend() { return std::make_unique<RingBackend>(); }

}  // namespace attnsuite::cuda
