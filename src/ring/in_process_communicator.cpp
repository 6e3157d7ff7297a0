#include <fmt/format.h>

#include <condition_variable>
#include <cstring>
#include <mutex>

#include "attnsuite/error.hpp"
#include "ring/communicator.hpp"

namespace attnsuite::ring {

namespace {

// The mailbox of each rank: the block it posted for rank + 1, and whether that rank took it.
struct Shared {
  struct Slot {
    const void* data = nullptr;
    std::size_t bytes = 0;
    std::uint64_t posted = 0;  // exchanges posted so far
    std::uint64_t taken = 0;   // exchanges the next rank has copied
  };
  explicit Shared(int world) : slots(static_cast<std::size_t>(world)) {}
  std::mutex mutex;
  std::condition_variable changed;
  std::vector<Slot> slots;
  bool failed = false;  // a rank threw: the others stop waiting
};

class InProcessCommunicator final : public RingCommunicator {
 public:
  InProcessCommunicator(std::shared_ptr<Shared> shared, int rank, int world)
      : shared_(std::move(shared)), rank_(rank), world_(world) {}
  void abort() override {
    std::lock_guard guard(shared_->mutex);
    shared_->failed = true;
    shared_->changed.notify_all();
  }

  int rank() const override { return rank_; }
  int world() const override { return world_; }

  void start_exchange(const void* send, std::size_t send_bytes, void* recv, std::size_t recv_bytes) override {
    ATTNSUITE_CHECK(!pending_, ErrorKind::Internal, "ring: start_exchange twice without wait_exchange");
    recv_ = recv;
    recv_bytes_ = recv_bytes;
    pending_ = true;
    std::lock_guard guard(shared_->mutex);
    auto& mine = shared_->slots[static_cast<std::size_t>(rank_)];
    mine.data = send;
    mine.bytes = send_bytes;
    ++mine.posted;
    ++exchanges_;
    shared_->changed.notify_all();
  }

  void wait_exchange() override {
    ATTNSUITE_CHECK(pending_, ErrorKind::Internal, "ring: wait_exchange without start_exchange");
    const std::size_t previous = static_cast<std::size_t>((rank_ + world_ - 1) % world_);
    std::unique_lock lock(shared_->mutex);
    auto& from = shared_->slots[previous];
    shared_->changed.wait(lock, [&] { return shared_->failed || from.posted >= exchanges_; });
    if (shared_->failed) throw Error(ErrorKind::Internal, "ring: another rank failed during the exchange");
    if (from.bytes != recv_bytes_) {
      shared_->failed = true;
      shared_->changed.notify_all();
      throw Error(ErrorKind::Internal, fmt::format("ring: rank {} expected {} bytes from rank {}, which sent {}", rank_,
                                                   recv_bytes_, previous, from.bytes));
    }
    // The copy runs under the lock: simple, and the CPU ring's blocks are small next to the
    // attention work between exchanges.
    if (recv_bytes_ > 0) std::memcpy(recv_, from.data, recv_bytes_);
    ++from.taken;
    shared_->changed.notify_all();
    auto& mine = shared_->slots[static_cast<std::size_t>(rank_)];
    shared_->changed.wait(lock, [&] { return shared_->failed || mine.taken >= exchanges_; });
    if (shared_->failed) throw Error(ErrorKind::Internal, "ring: another rank failed during the exchange");
    pending_ = false;
  }

 private:
  std::shared_ptr<Shared> shared_;
  int rank_, world_;
  void* recv_ = nullptr;
  std::size_t recv_bytes_ = 0;
  bool pending_ = false;
  std::uint64_t exchanges_ = 0;
};

}  // namespace

std::vector<std::unique_ptr<RingCommunicator>> make_in_process_ring(int world) {
  ATTNSUITE_CHECK(world >= 1, ErrorKind::Usage, fmt::format("ring: {} ranks; need at least 1", world));
  auto shared = std::make_shared<Shared>(world);
  std::vector<std::unique_ptr<RingCommunicator>> out;
  for (int r = 0; r < world; ++r) out.push_back(std::make_unique<InProcessCommunicator>(shared, r, world));
  return out;
}

}  // namespace attnsuite::ring
