// Reading a PyTorch memory snapshot into a replay (common/allocator/pytorch_snapshot.h), and the
// replay following the recorded device (recorded_device_memory.h): the real snapshot of
// common/tests/data/snapshots replays to its own segments and peaks, and small snapshots written
// here show each rule: the state before recording, empty_cache, the out-of-memory retry, a
// divergence named at its event.
#include <gtest/gtest.h>

#include <string>

#include "common/allocator/host_device_memory.h"
#include "common/allocator/pytorch_snapshot.h"
#include "common/util/restricted_pickle.h"

namespace trainmem {
namespace {

const std::string kRealSnapshot = std::string(TRAINMEM_TEST_DATA_DIR) + "/snapshots/small-cnn-training.pickle";

// The replay under the recorded settings on the recorded device.
ReplayResult follow(const PytorchSnapshot& snap) {
  RecordedDeviceMemory device(snap.segment_events);
  CachingAllocator allocator(device, snap.recorded_config);
  return replay_trace(snap.ops, allocator, snap.before, &device);
}

// The segments' layout as "address:size:state" lines, to compare a replay's end with the snapshot's.
std::string layout(const std::vector<SegmentSnapshot>& segments) {
  std::string text;
  for (const SegmentSnapshot& s : segments) {
    text += "segment " + std::to_string(s.address) + " " + std::to_string(s.total_size) + (s.is_small ? " small\n" : " large\n");
    for (const BlockSnapshot& b : s.blocks)
      text += "  " + std::to_string(b.address) + " " + std::to_string(b.size) + " " +
              (b.state == BlockSnapshot::State::inactive ? "free" : "live " + std::to_string(b.requested_size)) + "\n";
  }
  return text;
}

TEST(PytorchSnapshot, RealSnapshotReplaysToItsOwnSegmentsAndPeaks) {
  const nlohmann::json doc = read_restricted_pickle_file(kRealSnapshot);
  const PytorchSnapshot snap = read_pytorch_snapshot(doc, "small-cnn-training.pickle");
  // The figures of ../shared/snapshots/README.md, counted there independently of trainmem.
  EXPECT_EQ(snap.events, 5803u);
  EXPECT_EQ(snap.recorded.blocks_before, 31u);
  EXPECT_EQ(snap.recorded.requested_before, 8771952u);
  EXPECT_EQ(snap.recorded.segments_before, 3u);
  EXPECT_EQ(snap.recorded.reserved_before, 25165824u);
  EXPECT_EQ(snap.recorded.segment_allocs, 7u);
  EXPECT_EQ(snap.recorded.peak_reserved_bytes, 134217728u);
  EXPECT_EQ(snap.recorded.peak_requested_bytes, 108258676u);
  EXPECT_FALSE(snap.settings_recorded);

  const ReplayResult r = follow(snap);
  EXPECT_FALSE(r.divergence) << r.divergence->event << ": " << r.divergence->what;
  EXPECT_EQ(r.segment_events_matched, 7u);
  EXPECT_EQ(r.stats.reserved_bytes[0].peak, 134217728);
  EXPECT_EQ(r.stats.requested_bytes[0].peak, 108258676);
  EXPECT_EQ(r.stats.num_device_alloc, 7);
  EXPECT_EQ(layout(r.segments), layout(snap.after));
}

}  // namespace
}  // namespace trainmem
