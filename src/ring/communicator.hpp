// What the ring needs from its transport (issue 10): each rank passes a K/V block to the next
// rank (rank + 1 mod W) while it receives the previous rank's. Two implementations: the
// in-process one below (threads, one per simulated rank; cpu-ring and the CPU tests) and NCCL
// (src/ring/cuda: ncclSend/ncclRecv on a stream of its own, overlapped with the local kernel).
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

namespace attnsuite::ring {

class RingCommunicator {
 public:
  virtual ~RingCommunicator() = default;
  virtual int rank() const = 0;
  virtual int world() const = 0;
  // Starts sending send_bytes from `send` to rank + 1 and receiving recv_bytes from rank − 1 into
  // `recv`. Neither buffer may be touched until wait_exchange() returns. The sizes must agree with
  // the peers' (the receiver's recv_bytes = the sender's send_bytes), else wait_exchange throws
  // Error(Internal).
  virtual void start_exchange(const void* send, std::size_t send_bytes, void* recv, std::size_t recv_bytes) = 0;
  // Completes the exchange started last: `recv` holds the previous rank's block and `send` may be
  // reused. (NCCL: the wait is enqueued on the compute stream, not on the host.)
  virtual void wait_exchange() = 0;
  // A rank that fails calls this so that its peers stop waiting for it (their waits throw).
  virtual void abort() = 0;
};

// W communicators over shared memory, for W threads of one process: communicator r is used by
// the thread of rank r only. start_exchange posts the send buffer; wait_exchange copies the
// previous rank's posted block into recv, then waits until the next rank has copied ours, so
// each exchange really moves the bytes (the CPU tests check the schedule on real copies).
std::vector<std::unique_ptr<RingCommunicator>> make_in_process_ring(int world);

}  // namespace attnsuite::ring
