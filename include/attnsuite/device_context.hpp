// What the runner needs from a device, so it never knows whether it measures the CPU or a GPU.
// The CPU context and make_device_context live in src/backends; the CUDA one in src/cuda/common.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "attnsuite/backend.hpp"
#include "attnsuite/generator_kind.hpp"
#include "attnsuite/sampler.hpp"
#include "attnsuite/tensor.hpp"

namespace attnsuite::bench {

// Times one region. CPU: steady clock around synchronous calls. CUDA: events on the stream.
class Timer {
 public:
  virtual ~Timer() = default;
  virtual void start() = 0;
  virtual void stop() = 0;
  // Milliseconds between start() and stop(); waits for the device where needed.
  virtual double elapsed_ms() = 0;
};

// An allocation on a device, released by the context that made it. Move-only.
class DeviceAllocation {
 public:
  virtual ~DeviceAllocation() = default;
  virtual void* data() const = 0;
  virtual std::size_t bytes() const = 0;
};

// The DeviceAllocation that owns a Buffer of `bytes` (any type with that constructor and data(),
// bytes()): the CPU context's of a HostBuffer, CUDA's of a DeviceBuffer.
template <class Buffer>
class BufferAllocation final : public DeviceAllocation {
 public:
  explicit BufferAllocation(std::size_t bytes) : buffer_(bytes) {}
  void* data() const override { return buffer_.data(); }
  std::size_t bytes() const override { return buffer_.bytes(); }

 private:
  Buffer buffer_;
};

class DeviceContext {
 public:
  virtual ~DeviceContext() = default;
  virtual Device device() const = 0;
  virtual std::string device_name() const = 0;  // "NVIDIA H200" or the CPU model

  // Tracked allocations: they count toward the device's MemoryTracker. Throw Error(OutOfMemory).
  virtual std::unique_ptr<DeviceAllocation> allocate(std::size_t bytes) = 0;
  virtual void copy_to_device(void* dst, const void* host_src, std::size_t bytes) = 0;
  virtual void copy_to_host(void* host_dst, const void* src, std::size_t bytes) = 0;
  // Fills with NaN (all-ones bits) so that an element a backend never writes fails the check.
  virtual void poison(void* dst, std::size_t bytes) = 0;

  // Fills `view` (its data on this device) in place with the device-capable generator `kind`
  // for tensor key `key` (genmath::tensor_key), bitwise equal to the host's values. Returns
  // false where the device cannot (the CPU: the runner then copies the host values instead).
  virtual bool generate(const TensorView& /*view*/, genmath::Kind /*kind*/, std::uint64_t /*key*/) { return false; }

  virtual Stream stream() = 0;
  virtual void synchronize() = 0;
  // Evicts the last-level cache so the next sample starts cold (an L2-sized write on a GPU;
  // a write over a buffer larger than the L3 on the CPU).
  virtual void flush_cache() = 0;
  virtual std::unique_ptr<Timer> make_timer() = 0;

  // Bytes the device can still give, for refusing a case before allocating ("needs X, Y free").
  virtual std::size_t free_bytes() = 0;
  // Current SM clock in MHz, if the device can say (NVML); 0 when unknown.
  virtual double clock_mhz() { return 0.0; }
  // Starts sampling clock and utilization while a case is timed; nullptr where the device has
  // nothing to sample (the CPU).
  virtual std::unique_ptr<PeriodicSampler> start_sampling() { return nullptr; }
  // Device memory in use, whoever holds it (CUDA: total − free), for the "reserved" figure;
  // nullopt where the device cannot say (the CPU: freed heap memory stays with the process).
  virtual std::optional<std::size_t> used_bytes() { return std::nullopt; }

  // Peak extra memory of one forward: reset before, read after. The default reads the
  // device's MemoryTracker; peers with their own allocator override through the backend.
  virtual void reset_peak_memory();
  virtual std::size_t peak_memory_since_reset();
};

// The context for a backend's device. CUDA contexts exist only in CUDA builds; asking for one
// elsewhere throws Error(Unsupported).
std::unique_ptr<DeviceContext> make_device_context(Device device);
std::unique_ptr<DeviceContext> make_cpu_context();

}  // namespace attnsuite::bench
