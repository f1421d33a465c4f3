#include "common/allocator/recorded_device_memory.h"

#include <limits>

#include "common/allocator/trace_replay.h"

namespace trainmem {

namespace {

std::string segment_text(const RecordedSegmentEvent& e) {
  return std::string(to_string(e.action)) + " of " + std::to_string(e.size) + " bytes at " + std::to_string(e.address) +
         " (event " + std::to_string(e.event) + ")";
}

}  // namespace

RecordedDeviceMemory::RecordedDeviceMemory(std::vector<RecordedSegmentEvent> events)
    : expected_(events.begin(), events.end()), recorded_(events.size()) {}

void RecordedDeviceMemory::begin_op(const TraceOp& op) {
  op_event_ = op.event;
  window_end_ = op.device_window_end;
  op_failed_in_trace_ = op.failed_in_trace;
}

void RecordedDeviceMemory::end_op() {
  // Every segment event recorded for this op must have happened in the replay too.
  if (comparing() && !expected_.empty() && expected_.front().event < window_end_) {
    const RecordedSegmentEvent& e = expected_.front();
    diverge(op_event_, "the real allocator made a " + segment_text(e) + " here; the replay did not",
            e.action == TraceAction::segment_alloc ? "cache search (best fit on the stream, max_split_size)"
                                                   : "release of cached segments (empty_cache, out-of-memory retry)");
  }
  window_end_ = 0;
  op_failed_in_trace_ = false;
}

void RecordedDeviceMemory::diverge(std::size_t event, std::string what, std::string rule) {
  if (divergence_) return;
  divergence_ = ReplayDivergence{event, std::move(what), std::move(rule)};
}

const RecordedSegmentEvent* RecordedDeviceMemory::next_in_window() const {
  if (expected_.empty() || expected_.front().event >= window_end_) return nullptr;
  return &expected_.front();
}

void* RecordedDeviceMemory::fresh(std::size_t bytes) {
  if (bytes > kUnlimited - in_use_) return nullptr;  // more than any device: the statistics stay countable
  // 2 MiB apart, like cudaMalloc's segments; never reused, so no address is ever handed out twice.
  constexpr std::size_t kAlign = std::size_t{2} << 20;
  const std::uintptr_t address = next_fresh_;
  next_fresh_ += (bytes + kAlign - 1) / kAlign * kAlign;
  in_use_ += bytes;
  return reinterpret_cast<void*>(address);
}

void* RecordedDeviceMemory::allocate(std::size_t bytes) {
  if (restore_address_) {  // a segment held before the trace: where the real one was
    const std::uintptr_t address = *restore_address_;
    restore_address_.reset();
    if (bytes > kUnlimited - in_use_) return nullptr;
    in_use_ += bytes;
    return reinterpret_cast<void*>(address);
  }
  if (!comparing()) return op_failed_in_trace_ ? nullptr : fresh(bytes);
  const RecordedSegmentEvent* e = next_in_window();
  if (e && e->action == TraceAction::segment_free) return nullptr;  // the real device refused here: free first
  if (e && e->action == TraceAction::segment_alloc) {
    if (e->size == bytes && bytes <= kUnlimited - in_use_) {
      const std::uintptr_t address = e->address;
      expected_.pop_front();
      ++matched_;
      in_use_ += bytes;
      return reinterpret_cast<void*>(address);
    }
    diverge(op_event_,
            "the replay asked the device for " + std::to_string(bytes) + " bytes where the real allocator made a " +
                segment_text(*e),
            "segment size (2 MiB small, 20 MiB below 10 MiB, else the request rounded to 2 MiB; pool by request size)");
    return fresh(bytes);
  }
  if (op_failed_in_trace_) return nullptr;  // the trace shows this request running out of memory
  diverge(op_event_,
          "the replay asked the device for a " + std::to_string(bytes) +
              "-byte segment where the real allocator took none (it served the request from its cache)",
          "cache search (best fit on the stream, max_split_size, the split rule)");
  return fresh(bytes);
}

void RecordedDeviceMemory::release(void* ptr, std::size_t bytes) {
  in_use_ -= bytes;
  if (!comparing()) return;
  const std::uintptr_t address = reinterpret_cast<std::uintptr_t>(ptr);
  // The releases of one empty_cache or retry, in any order: PyTorch and the replay both walk the
  // pools, but which pool first is not a decision worth calling a divergence.
  for (auto it = expected_.begin(); it != expected_.end() && it->event < window_end_ &&
                                    it->action == TraceAction::segment_free;
       ++it) {
    if (it->address == address && it->size == bytes) {
      expected_.erase(it);
      ++matched_;
      return;
    }
  }
  const RecordedSegmentEvent* e = next_in_window();
  diverge(op_event_,
          "the replay released the " + std::to_string(bytes) + "-byte segment at " + std::to_string(address) +
              (e ? " where the real allocator made a " + segment_text(*e) : " where the real allocator released none"),
          "release of cached segments (empty_cache, out-of-memory retry: wholly free segments only)");
}

void* RecordedDeviceMemory::reserve_address_range(std::size_t bytes) {
  // Address space only (pages count when mapped); the fresh addresses run out only after ~900,000.
  constexpr std::size_t kAlign = std::size_t{2} << 20;
  const std::size_t aligned = (bytes + kAlign - 1) / kAlign * kAlign;
  if (aligned > std::numeric_limits<std::uintptr_t>::max() - next_fresh_) return nullptr;
  const std::uintptr_t address = next_fresh_;
  next_fresh_ += aligned;
  return reinterpret_cast<void*>(address);
}

bool RecordedDeviceMemory::map_pages(void* /*ptr*/, std::size_t bytes, std::size_t /*page_bytes*/) {
  if (op_failed_in_trace_ || bytes > kUnlimited - in_use_) return false;
  in_use_ += bytes;
  return true;
}

void RecordedDeviceMemory::unmap_pages(void* /*ptr*/, std::size_t bytes, std::size_t /*page_bytes*/, StreamId /*stream*/) {
  in_use_ -= bytes;
}

}  // namespace trainmem
