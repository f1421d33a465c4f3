// A device that answers as the recorded GPU did: replaying a PyTorch snapshot under the settings
// it was recorded with, the caching allocator asks this device for segments, and it answers from
// the trace's own segment events -- the address cudaMalloc gave, a refusal where the real
// allocator had to free cached segments first (its out-of-memory retry) or ran out of memory.
// Each answer is also a check: when the replayed allocator asks for something the real one did
// not (another size, a segment where the real one found a cached block, a release of another
// segment), that is the first divergence, recorded with its event and the rule involved. After
// it, the device stops comparing and hands out fresh addresses (far above any real one) without
// limit, so the replay still runs to the end.
//
// The replay (trace_replay.cpp) tells the device which op it is replaying: begin_op(op) before,
// end_op() after. An op may use the segment events recorded before its window's end
// (TraceOp::device_window_end): PyTorch records segment_alloc/segment_free before the alloc they
// serve.
#pragma once
#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <vector>

#include "common/allocator/device_memory.h"
#include "common/allocator/trace_event.h"

namespace trainmem {

struct TraceOp;

// A segment event as the trace recorded it.
struct RecordedSegmentEvent {
  TraceAction action = TraceAction::segment_alloc;  // segment_alloc or segment_free
  std::uintptr_t address = 0;
  std::size_t size = 0;
  StreamId stream = kDefaultStream;
  std::size_t event = 0;  // its index in the trace
};

// Where the replay first decided otherwise than the real allocator.
struct ReplayDivergence {
  std::size_t event = 0;  // the trace event (the op being replayed, or the segment event missed)
  std::string what;       // what differed, e.g. "the real allocator took a 20971520-byte segment ..."
  std::string rule;       // the allocator rule that decided it, e.g. "segment size"
};

class RecordedDeviceMemory final : public DeviceMemory {
 public:
  // `events`: the trace's segment_alloc/segment_free in trace order.
  explicit RecordedDeviceMemory(std::vector<RecordedSegmentEvent> events);

  // The next allocate() is a segment held before the trace began: it gets `address`.
  void restore_next(std::uintptr_t address) { restore_address_ = address; }
  void begin_op(const TraceOp& op);
  void end_op();
  // A decision outside the device that differed (the replay compares each block's address).
  void diverge(std::size_t event, std::string what, std::string rule);
  const std::optional<ReplayDivergence>& divergence() const { return divergence_; }
  // Segment events of the trace the replay has matched so far.
  std::size_t matched_events() const { return matched_; }
  std::size_t recorded_events() const { return recorded_; }

  void* allocate(std::size_t bytes) override;
  void release(void* ptr, std::size_t bytes) override;
  // Expandable segments: address ranges from the fresh addresses, pages mapped without limit but
  // where the trace shows the request running out. Their addresses are not the recorded ones, so
  // a replay of an expandable recording compares peaks and segments' sizes, not addresses.
  bool supports_virtual_memory() const override { return true; }
  void* reserve_address_range(std::size_t bytes) override;
  bool map_pages(void* ptr, std::size_t bytes, std::size_t page_bytes) override;
  void unmap_pages(void* ptr, std::size_t bytes, std::size_t page_bytes, StreamId stream) override;

  std::size_t total_bytes() const override { return kUnlimited; }
  std::size_t free_bytes() const override { return kUnlimited - in_use_; }
  std::string name() const override { return "the recorded device (its own segment events)"; }

 private:
  // More than any card (16 TiB), yet small enough that expandable segments' reserved ranges
  // (1 1/8 of the capacity each) fit many times above kFreshAddresses.
  static constexpr std::size_t kUnlimited = std::size_t{1} << 44;
  static constexpr std::uintptr_t kFreshAddresses = std::uintptr_t{1} << 56;  // above every user-space address

  void* fresh(std::size_t bytes);
  bool comparing() const { return !divergence_.has_value(); }
  const RecordedSegmentEvent* next_in_window() const;

  std::deque<RecordedSegmentEvent> expected_;
  std::size_t recorded_ = 0;
  std::size_t matched_ = 0;
  std::optional<std::uintptr_t> restore_address_;
  std::optional<ReplayDivergence> divergence_;
  std::size_t op_event_ = 0;          // the op being replayed
  std::size_t window_end_ = 0;        // it may use expected events before this index
  bool op_failed_in_trace_ = false;   // the trace shows this request running out of memory
  std::uintptr_t next_fresh_ = kFreshAddresses;
  std::size_t in_use_ = 0;
};

}  // namespace trainmem
