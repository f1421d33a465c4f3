// What the lazy loader needs from a device beyond common/device/device_ops.h: host staging
// memory that can be pinned, a copy stream of its own, and events to order it against the
// compute stream. On a GPU these are cudaHostAlloc, a non-blocking cudaStream and cudaEvents;
// on the CPU backend host and "device" memory are the same kind, so the staging buffer is plain
// host memory whatever `pinned` says, a copy is a memcpy done by the calling (worker) thread,
// and the events are no-ops (the worker's memcpy has finished when it returns).
#pragma once
#include <cstddef>

#include "common/device/device.h"

namespace trainmem::lazy_loading {

// Host memory a batch is assembled in before it goes to the device (none on the meta device,
// where no batch is assembled: data() is null).
class HostStaging {
 public:
  HostStaging(Device& device, std::size_t bytes, bool pinned);
  ~HostStaging();
  HostStaging(const HostStaging&) = delete;
  HostStaging& operator=(const HostStaging&) = delete;

  void* data() { return data_; }
  std::size_t bytes() const { return bytes_; }
  bool pinned() const { return pinned_; }  // true only on a GPU, with cudaHostAlloc

 private:
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
  bool pinned_ = false;
};

// A stream for host-to-device copies that overlap the compute stream. Every call is made by one
// thread (the loader's worker); on a GPU the first call sets that thread's device.
class CopyStream {
 public:
  explicit CopyStream(Device& device);
  ~CopyStream();
  CopyStream(const CopyStream&) = delete;
  CopyStream& operator=(const CopyStream&) = delete;

  void copy_to_device_async(void* dst, const void* src, std::size_t bytes);
  void synchronize();  // the copies issued so far have landed
  // Later copies on this stream wait for `event` (recorded on the compute stream).
  void wait(void* event);
  void bind_thread();  // cudaSetDevice for the calling thread (no-op on the CPU)

 private:
  Device& device_;
  void* stream_ = nullptr;  // cudaStream_t
};

// An event on the compute (default) stream: "the compute stream has got this far".
class ComputeEvent {
 public:
  explicit ComputeEvent(Device& device);
  ~ComputeEvent();
  ComputeEvent(const ComputeEvent&) = delete;
  ComputeEvent& operator=(const ComputeEvent&) = delete;

  void record();  // on the default stream
  void* handle() { return event_; }

 private:
  Device& device_;
  void* event_ = nullptr;  // cudaEvent_t
};

}  // namespace trainmem::lazy_loading
