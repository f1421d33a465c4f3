// The allocator's view of a device: where segments come from (cudaMalloc on a GPU, a budget on
// the CPU), and events that tell when work queued on a stream has finished.
//
// The caching allocator is written once against this interface, so the same policy and the same
// statistics serve the CUDA backend, the CPU backend and the trace replayer.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace trainmem {

// A stream is an ordered queue of device work. On CUDA it is a cudaStream_t cast to an integer;
// on the CPU every stream runs synchronously. 0 is the default stream.
using StreamId = std::uintptr_t;
constexpr StreamId kDefaultStream = 0;

// An event recorded on a stream; nullptr means "already complete".
using EventHandle = void*;

class DeviceMemory {
 public:
  virtual ~DeviceMemory() = default;

  // One device allocation of exactly `bytes` (a segment). Returns nullptr when the device has no
  // room; never throws for lack of memory.
  virtual void* allocate(std::size_t bytes) = 0;
  // Gives a segment back. `bytes` is the size it was allocated with.
  virtual void release(void* ptr, std::size_t bytes) = 0;

  virtual std::size_t total_bytes() const = 0;  // the capacity (the budget on the CPU)
  virtual std::size_t free_bytes() const = 0;   // what the device could still hand out
  virtual std::string name() const = 0;         // e.g. "cuda:0", "cpu budget (16.00 GiB)"

  // Cross-stream frees (PyTorch's record_stream): the allocator records an event on every other
  // stream that used a block and reuses the block only when all those events have completed.
  // The CPU runs streams synchronously, so by default every event is complete at once.
  virtual EventHandle record_event(StreamId /*stream*/) { return nullptr; }
  virtual bool event_completed(EventHandle /*event*/) { return true; }
  virtual void synchronize_event(EventHandle /*event*/) {}
  virtual void destroy_event(EventHandle /*event*/) {}
};

}  // namespace trainmem
