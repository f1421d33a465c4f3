// The allocator's view of a device: where segments come from (cudaMalloc on a GPU, a budget on
// the CPU), optionally address ranges that pages are mapped into (expandable segments), and
// events that tell when work queued on a stream has finished.
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

  // Why the device's last refusal (allocate, map_pages) came from the host rather than from the
  // device being full: the CPU backend's device memory is host memory, and the host may refuse
  // it within the budget (ulimit -v). "" when the device was simply full, or has no such case.
  // The allocator then throws HostMemoryError with it instead of an out-of-memory report, whose
  // advice (smaller batch, recompute) would not be the fix.
  virtual std::string host_refusal() const { return ""; }

  virtual std::size_t total_bytes() const = 0;  // the capacity (the budget on the CPU)
  virtual std::size_t free_bytes() const = 0;   // what the device could still hand out
  virtual std::string name() const = 0;         // e.g. "cuda:0", "cpu budget (16.00 GiB)"

  // --- Virtual memory, for expandable segments (PyTorch's expandable_segments:True).
  // A device that supports it can reserve a range of addresses with no memory behind it, then
  // map memory into it page by page and unmap it again: one segment that grows and shrinks in
  // place (cuMemAddressReserve + cuMemCreate/cuMemMap on CUDA; mmap(PROT_NONE) + mprotect on the
  // CPU). Only mapped bytes count against the capacity.
  virtual bool supports_virtual_memory() const { return false; }
  // Reserves `bytes` of address space (a multiple of the page sizes used). Returns nullptr when
  // the address space cannot be had; never takes memory.
  virtual void* reserve_address_range(std::size_t /*bytes*/) { return nullptr; }
  // Gives back a reserved range. Every page in it must be unmapped first.
  virtual void release_address_range(void* /*ptr*/, std::size_t /*bytes*/) {}
  // Maps memory at [ptr, ptr + bytes) inside a reserved range, one physical allocation per page of
  // `page_bytes` (so that each page can be unmapped on its own later). All or nothing: returns
  // false, with nothing mapped, when the device has no room for every page.
  virtual bool map_pages(void* /*ptr*/, std::size_t /*bytes*/, std::size_t /*page_bytes*/) { return false; }
  // Unmaps the pages at [ptr, ptr + bytes) and gives their memory back, after the work queued on
  // `stream` (which may still be using them) has finished.
  virtual void unmap_pages(void* /*ptr*/, std::size_t /*bytes*/, std::size_t /*page_bytes*/, StreamId /*stream*/) {}
  // Waits for the work queued on every stream of the device (cudaDeviceSynchronize): before the
  // allocator gives everything back at teardown, when the streams that used its blocks (a copy
  // stream, a communicator's) cannot be named any more. The CPU has nothing in flight.
  virtual void synchronize_all_streams() {}

  // Cross-stream frees (PyTorch's record_stream): the allocator records an event on every other
  // stream that used a block and reuses the block only when all those events have completed.
  // The CPU runs streams synchronously, so by default every event is complete at once.
  virtual EventHandle record_event(StreamId /*stream*/) { return nullptr; }
  virtual bool event_completed(EventHandle /*event*/) { return true; }
  virtual void synchronize_event(EventHandle /*event*/) {}
  virtual void destroy_event(EventHandle /*event*/) {}
};

}  // namespace trainmem
