// Reading a PyTorch memory snapshot into a replay (common/allocator/pytorch_snapshot.h), and the
// replay following the recorded device (recorded_device_memory.h): the real snapshot of
// common/tests/data/snapshots replays to its own segments and peaks, and small snapshots written
// here show each rule: the state before recording, empty_cache, the out-of-memory retry, a
// divergence named at its event.
#include <gtest/gtest.h>

#include <string>
#include <vector>

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

// Small snapshots written by hand. Addresses are GiB-aligned so the layouts read easily.
constexpr std::uint64_t MB = 1 << 20;
constexpr std::uint64_t kA = std::uint64_t{1} << 30;  // a segment's address
constexpr std::uint64_t kB = std::uint64_t{2} << 30;  // another's

// An event as PyTorch writes it (an oom's `addr` is the device's free bytes, which PyTorch names "device_free").
nlohmann::json ev(const char* action, std::uint64_t addr, std::uint64_t size, std::uint64_t stream = 0) {
  return {{"action", action}, {std::string(action) == "oom" ? "device_free" : "addr", addr}, {"size", size},
          {"stream", stream}, {"frames", nlohmann::json::array()}};
}

nlohmann::json block(std::uint64_t address, std::uint64_t size, std::uint64_t requested, const char* state) {
  return {{"address", address}, {"size", size}, {"requested_size", requested}, {"state", state}};
}

// Lists as std::vector: a one-element braced list of nlohmann::json is read as that element by
// some compilers (clang) and as a list by others (GCC).
using List = std::vector<nlohmann::json>;

nlohmann::json segment(std::uint64_t address, std::uint64_t size, bool small, const List& blocks) {
  nlohmann::json s = nlohmann::json::object();
  s["device"] = 0;
  s["address"] = address;
  s["total_size"] = size;
  s["stream"] = 0;
  s["segment_type"] = small ? "small" : "large";
  s["is_expandable"] = false;
  s["blocks"] = nlohmann::json(blocks);
  return s;
}

nlohmann::json snapshot_of(const List& events, const List& segments = {}) {
  nlohmann::json doc = nlohmann::json::object();
  doc["segments"] = nlohmann::json(segments);
  doc["device_traces"] = nlohmann::json::array();
  doc["device_traces"].push_back(nlohmann::json(events));
  return doc;
}

std::string error_of(const nlohmann::json& doc, std::optional<int> device = std::nullopt) {
  try {
    (void)read_pytorch_snapshot(doc, "hand.json", device);
  } catch (const TraceError& e) {
    return e.what();
  }
  return "";
}

TEST(PytorchSnapshot, TheStateBeforeRecordingIsRebuiltAndCounted) {
  // Segment A (20 MiB) held a live 4 MiB block the trace never touches and a 2 MiB block it
  // frees; segment B (2 MiB, small) the trace releases (its empty_cache()).
  const nlohmann::json doc = snapshot_of(
      {ev("free_requested", kA + 4 * MB, 2 * MB), ev("free_completed", kA + 4 * MB, 2 * MB),
       ev("segment_free", kB, 2 * MB), ev("alloc", kA + 4 * MB, 3 * MB), ev("free_requested", kA + 4 * MB, 3 * MB),
       ev("free_completed", kA + 4 * MB, 3 * MB)},
      {segment(kA, 20 * MB, false, {block(kA, 4 * MB, 4 * MB, "active_allocated"), block(kA + 4 * MB, 16 * MB, 0, "inactive")})});
  const PytorchSnapshot snap = read_pytorch_snapshot(doc, "hand.json");
  EXPECT_EQ(snap.recorded.segments_before, 2u);
  EXPECT_EQ(snap.recorded.reserved_before, 22 * MB);
  EXPECT_EQ(snap.recorded.blocks_before, 2u);
  EXPECT_EQ(snap.recorded.requested_before, 6 * MB);
  EXPECT_EQ(snap.recorded.peak_requested_bytes, 7 * MB);  // 6 - 2 + 3
  EXPECT_EQ(snap.recorded.peak_reserved_bytes, 22 * MB);
  EXPECT_EQ(snap.recorded.final_reserved_bytes, 20 * MB);
  ASSERT_EQ(snap.before.size(), 2u);
  EXPECT_EQ(layout(snap.before), "segment " + std::to_string(kA) + " 20971520 large\n  " + std::to_string(kA) +
                                     " 4194304 live 4194304\n  " + std::to_string(kA + 4 * MB) + " 2097152 live 2097152\n  " +
                                     std::to_string(kA + 6 * MB) + " 14680064 free\nsegment " + std::to_string(kB) +
                                     " 2097152 small\n  " + std::to_string(kB) + " 2097152 free\n");
  // The segment_free with no segment_alloc after it is the program's empty_cache().
  ASSERT_EQ(snap.ops.size(), 4u);
  EXPECT_EQ(snap.ops[1].action, TraceOp::Action::empty_cache);
  EXPECT_EQ(snap.ops[1].event, 2u);

  const ReplayResult r = follow(snap);
  EXPECT_FALSE(r.divergence) << r.divergence->event << ": " << r.divergence->what;
  EXPECT_EQ(r.segment_events_matched, 1u);
  EXPECT_EQ(r.stats.reserved_bytes[0].peak, 22 * MB);
  EXPECT_EQ(r.stats.requested_bytes[0].peak, 7 * MB);
  EXPECT_EQ(r.stats.allocated_bytes[0].peak, 7 * MB);
  EXPECT_FALSE(r.peak_reserved_event);  // reserved peaked before the first event
  EXPECT_EQ(r.stats.num_device_alloc, 0);
  EXPECT_EQ(layout(r.segments), layout(snap.after));
}

TEST(PytorchSnapshot, AFreedBlockKeepsTheRestTheLargePoolWouldNotSplitOff) {
  // A 20 MiB segment held before recording: a block of 19.5 MiB requested, freed in the trace.
  // The allocator never splits off a rest of 1 MiB or less in the large pool: the block was the
  // whole segment.
  const nlohmann::json doc = snapshot_of({ev("free_requested", kA, 20 * MB - MB / 2), ev("free_completed", kA, 20 * MB - MB / 2)},
                                         {segment(kA, 20 * MB, false, {block(kA, 20 * MB, 0, "inactive")})});
  const PytorchSnapshot snap = read_pytorch_snapshot(doc, "hand.json");
  ASSERT_EQ(snap.before.size(), 1u);
  ASSERT_EQ(snap.before[0].blocks.size(), 1u);
  EXPECT_EQ(snap.before[0].blocks[0].size, 20 * MB);
  const ReplayResult r = follow(snap);
  EXPECT_EQ(r.stats.allocated_bytes[0].peak, static_cast<std::int64_t>(20 * MB));
  EXPECT_EQ(layout(r.segments), layout(snap.after));
}

TEST(PytorchSnapshot, TheOutOfMemoryRetryIsFollowed) {
  // A cached 20 MiB segment is too small for 30 MiB: the device refused, the allocator released
  // the cached segment and retried (segment_free, then segment_alloc, before the alloc).
  const nlohmann::json doc = snapshot_of(
      {ev("segment_alloc", kA, 20 * MB), ev("alloc", kA, 8 * MB), ev("free_requested", kA, 8 * MB),
       ev("free_completed", kA, 8 * MB), ev("segment_free", kA, 20 * MB), ev("segment_alloc", kB, 30 * MB),
       ev("alloc", kB, 30 * MB)},
      {segment(kB, 30 * MB, false, {block(kB, 30 * MB, 30 * MB, "active_allocated")})});
  const PytorchSnapshot snap = read_pytorch_snapshot(doc, "hand.json");
  EXPECT_EQ(snap.recorded.peak_reserved_bytes, 30 * MB);
  for (const TraceOp& op : snap.ops) EXPECT_NE(op.action, TraceOp::Action::empty_cache);
  const ReplayResult r = follow(snap);
  EXPECT_FALSE(r.divergence) << r.divergence->event << ": " << r.divergence->what;
  EXPECT_EQ(r.segment_events_matched, 3u);
  EXPECT_EQ(r.stats.num_alloc_retries, 1);
  EXPECT_EQ(r.stats.reserved_bytes[0].peak, 30 * MB);
  ASSERT_TRUE(r.peak_reserved_event);
  EXPECT_EQ(*r.peak_reserved_event, 6u);
  EXPECT_EQ(layout(r.segments), layout(snap.after));
}

TEST(PytorchSnapshot, ARecordedOutOfMemoryFailsAgainAndTheRunGoesOn) {
  // 30 MiB did not fit (the device had 5 MiB free); the program went on and allocated 4 MiB.
  const nlohmann::json doc = snapshot_of(
      {ev("segment_alloc", kA, 20 * MB), ev("alloc", kA, 8 * MB), ev("oom", 5 * MB, 30 * MB), ev("alloc", kA + 8 * MB, 4 * MB)},
      {segment(kA, 20 * MB, false,
               {block(kA, 8 * MB, 8 * MB, "active_allocated"), block(kA + 8 * MB, 4 * MB, 4 * MB, "active_allocated"),
                block(kA + 12 * MB, 8 * MB, 0, "inactive")})});
  const PytorchSnapshot snap = read_pytorch_snapshot(doc, "hand.json");
  EXPECT_EQ(snap.recorded.ooms, 1u);
  ASSERT_TRUE(snap.recorded.capacity_from_oom);
  EXPECT_EQ(*snap.recorded.capacity_from_oom, 25 * MB);  // 20 MiB reserved + 5 MiB free on the device
  {  // trainmem's own snapshots write the free bytes as "addr"
    nlohmann::json own = doc;
    nlohmann::json& oom = own["device_traces"][0][2];
    oom["addr"] = oom["device_free"];
    oom.erase("device_free");
    EXPECT_EQ(read_pytorch_snapshot(own, "own.json").recorded.capacity_from_oom, 25 * MB);
  }
  const ReplayResult r = follow(snap);
  EXPECT_FALSE(r.divergence) << r.divergence->event << ": " << r.divergence->what;
  EXPECT_FALSE(r.oom);
  EXPECT_EQ(r.recorded_ooms_again, 1u);
  EXPECT_EQ(r.stats.num_ooms, 1);
  EXPECT_EQ(r.events_replayed, r.events_total);
  EXPECT_EQ(layout(r.segments), layout(snap.after));

  // On a bigger card the request is served, and stays live: the recorded run never had it.
  BudgetDeviceMemory card(64 * MB, /*backed=*/false);
  CachingAllocator allocator(card);
  const ReplayResult bigger = replay_trace(snap.ops, allocator, snap.before);
  EXPECT_EQ(bigger.recorded_ooms_served, 1u);
  EXPECT_EQ(bigger.stats.reserved_bytes[0].peak, 50 * MB);
}

TEST(PytorchSnapshot, TheFirstDifferentDecisionIsNamedWithItsEventAndRule) {
  // The real allocator placed the second block 8 MiB in, where the rules put it at 4 MiB (the
  // remainder of the first split): someone else's rules, or a trace edited by hand.
  const nlohmann::json doc = snapshot_of(
      {ev("segment_alloc", kA, 20 * MB), ev("alloc", kA, 4 * MB), ev("alloc", kA + 8 * MB, 4 * MB)},
      {segment(kA, 20 * MB, false,
               {block(kA, 4 * MB, 4 * MB, "active_allocated"), block(kA + 4 * MB, 4 * MB, 0, "inactive"),
                block(kA + 8 * MB, 4 * MB, 4 * MB, "active_allocated"), block(kA + 12 * MB, 8 * MB, 0, "inactive")})});
  const ReplayResult r = follow(read_pytorch_snapshot(doc, "hand.json"));
  ASSERT_TRUE(r.divergence);
  EXPECT_EQ(r.divergence->event, 2u);
  EXPECT_NE(r.divergence->what.find("placed this 4194304-byte block at " + std::to_string(kA + 8 * MB)), std::string::npos)
      << r.divergence->what;
  EXPECT_NE(r.divergence->rule.find("best fit"), std::string::npos) << r.divergence->rule;

  // A segment the real allocator took where the rules serve the request from the cache.
  const nlohmann::json extra = snapshot_of({ev("segment_alloc", kA, 20 * MB), ev("alloc", kA, 4 * MB),
                                            ev("segment_alloc", kB, 20 * MB), ev("alloc", kB, 4 * MB)});
  const ReplayResult r2 = follow(read_pytorch_snapshot(extra, "hand.json"));
  ASSERT_TRUE(r2.divergence);
  EXPECT_EQ(r2.divergence->event, 3u);
  EXPECT_NE(r2.divergence->what.find("segment_alloc of 20971520 bytes at " + std::to_string(kB) + " (event 2)"),
            std::string::npos)
      << r2.divergence->what;
  EXPECT_NE(r2.divergence->rule.find("cache search"), std::string::npos);
}

TEST(PytorchSnapshot, DevicesAreChosenAndTheOnlyOneWithEventsIsTheDefault) {
  nlohmann::json doc = snapshot_of({});
  doc["device_traces"].push_back(nlohmann::json(List{ev("segment_alloc", kA, 2 * MB), ev("alloc", kA, 512)}));
  doc["segments"].push_back(segment(kA, 2 * MB, true, {block(kA, 512, 512, "active_allocated"), block(kA + 512, 2 * MB - 512, 0, "inactive")}));
  doc["segments"][0]["device"] = 1;
  EXPECT_EQ(read_pytorch_snapshot(doc, "hand.json").device, 1);
  EXPECT_EQ(read_pytorch_snapshot(doc, "hand.json", 0).ops.size(), 0u);
  EXPECT_EQ(read_pytorch_snapshot(doc, "hand.json", 0).after.size(), 0u);  // device 1's segment is not device 0's
  doc["device_traces"][0] = nlohmann::json(List{ev("alloc", kB, 512), ev("free_requested", kB, 512)});
  EXPECT_NE(error_of(doc).find("several devices have events: 0 (2 events), 1 (2 events); pick one with --device N"),
            std::string::npos)
      << error_of(doc);
  EXPECT_NE(error_of(doc, 2).find("--device 2: the snapshot has traces of devices 0 to 1"), std::string::npos);
  EXPECT_EQ(read_pytorch_snapshot(doc, "hand.json", 1).device, 1);
}

TEST(PytorchSnapshot, WhatIsNotFollowedIsNamedWithItsEvent) {
  const nlohmann::json doc = snapshot_of({ev("segment_alloc", kA, 2 * MB), ev("alloc", kA, 512), ev("user_marker", 0, 0),
                                          ev("free_requested", kA, 512), ev("alloc", kA + 512, 512),
                                          ev("free_completed", kA, 512), ev("snapshot", 0, 0), ev("free_completed", kB, 512)},
                                         {segment(kA, 2 * MB, true, {block(kA, 512, 0, "inactive"), block(kA + 512, 512, 512, "active_allocated"),
                                                                      block(kA + 1024, 2 * MB - 1024, 0, "inactive")})});
  const PytorchSnapshot snap = read_pytorch_snapshot(doc, "hand.json");
  std::string notes;
  for (const SnapshotNote& n : snap.not_followed) notes += (n.event ? std::to_string(*n.event) : "-") + ": " + n.text + "\n";
  EXPECT_FALSE(snap.settings_recorded);
  EXPECT_NE(notes.find("2: unknown action \"user_marker\": not followed"), std::string::npos) << notes;
  EXPECT_NE(notes.find("7: free_completed of the block at " + std::to_string(kB) + ", which has no free_requested waiting"),
            std::string::npos)
      << notes;
  EXPECT_EQ(notes.find("event 3"), std::string::npos) << notes;  // the cross-stream free is followed (below)
  EXPECT_EQ(snap.not_followed.size(), 2u) << notes;
}

// A block another stream used (record_stream): its free completes later, and until then the
// real allocator does not reuse it. The replay follows it: the next request is placed after it,
// the one after the free_completed reuses it.
TEST(PytorchSnapshot, CrossStreamFreesWaitForTheirFreeCompleted) {
  const List events = {ev("segment_alloc", kA, 2 * MB), ev("alloc", kA, 512), ev("free_requested", kA, 512),
                       ev("alloc", kA + 512, 512), ev("free_completed", kA, 512), ev("alloc", kA, 512)};
  const nlohmann::json doc = snapshot_of(
      events, {segment(kA, 2 * MB, true, {block(kA, 512, 512, "active_allocated"), block(kA + 512, 512, 512, "active_allocated"),
                                           block(kA + 1024, 2 * MB - 1024, 0, "inactive")})});
  const PytorchSnapshot snap = read_pytorch_snapshot(doc, "hand.json");
  EXPECT_TRUE(snap.not_followed.empty()) << snap.not_followed.front().text;
  ASSERT_EQ(snap.ops.size(), 4u);
  EXPECT_TRUE(snap.ops[1].deferred);
  EXPECT_EQ(snap.ops[1].completes_at, 4u);
  const ReplayResult r = follow(snap);
  EXPECT_FALSE(r.divergence) << r.divergence->event << ": " << r.divergence->what;
  EXPECT_EQ(layout(r.segments), layout(snap.after));

  // Without its free_completed the free never completes: the block waits at the end, as the
  // snapshot shows it, and the last request goes after it.
  const List waiting = {ev("segment_alloc", kA, 2 * MB), ev("alloc", kA, 512), ev("free_requested", kA, 512),
                        ev("alloc", kA + 512, 512)};
  const PytorchSnapshot pending = read_pytorch_snapshot(
      snapshot_of(waiting, {segment(kA, 2 * MB, true, {block(kA, 512, 512, "active_pending_free"),
                                                       block(kA + 512, 512, 512, "active_allocated"),
                                                       block(kA + 1024, 2 * MB - 1024, 0, "inactive")})}),
      "hand.json");
  EXPECT_TRUE(pending.not_followed.empty()) << pending.not_followed.front().text;
  EXPECT_TRUE(pending.ops[1].deferred);
  EXPECT_FALSE(pending.ops[1].completes_at);
  const ReplayResult w = follow(pending);
  EXPECT_FALSE(w.divergence) << w.divergence->event << ": " << w.divergence->what;
  EXPECT_EQ(w.stats.active_bytes[0].current, 1024);  // both blocks active, one of them allocated
  EXPECT_EQ(w.stats.allocated_bytes[0].current, 512);
  EXPECT_EQ(layout(w.segments), layout(pending.after));

  // Replayed as if the free completed at once (the rule before), the second request takes the
  // freed block, where the real allocator did not: the divergence the deferral avoids.
  PytorchSnapshot at_once = snap;
  at_once.ops[1].deferred = false;
  const ReplayResult d = follow(at_once);
  ASSERT_TRUE(d.divergence);
  EXPECT_EQ(d.divergence->event, 3u);
}

TEST(PytorchSnapshot, RecordedSettingsAreTheReplaysSettings) {
  nlohmann::json doc = snapshot_of(nlohmann::json::array());
  doc["allocator_settings"] = {{"PYTORCH_CUDA_ALLOC_CONF", "max_split_size_mb:128"}, {"max_split_size", 128 * MB},
                               {"expandable_segments", false}, {"garbage_collection_threshold", 0.0},
                               {"roundup_power2_divisions", {{"1", 0}, {"2", 0}}}};
  PytorchSnapshot snap = read_pytorch_snapshot(doc, "hand.json");
  EXPECT_TRUE(snap.settings_recorded);
  EXPECT_EQ(snap.recorded_config.max_split_size, 128 * MB);
  EXPECT_EQ(snap.recorded_settings_text, "max_split_size_mb:128");
  EXPECT_TRUE(snap.not_followed.empty());
  doc["allocator_settings"]["max_split_size"] = -1;
  doc["allocator_settings"]["expandable_segments"] = true;
  doc["allocator_settings"]["garbage_collection_threshold"] = 0.6;
  doc["allocator_settings"]["roundup_power2_divisions"]["2"] = 4;
  snap = read_pytorch_snapshot(doc, "hand.json");
  EXPECT_EQ(snap.recorded_config.max_split_size, kNoMaxSplit);
  EXPECT_TRUE(snap.recorded_config.expandable_segments);
  std::string notes;
  for (const SnapshotNote& n : snap.not_followed) notes += n.text + "\n";
  EXPECT_EQ(snap.recorded_config.garbage_collection_threshold, 0.6);
  EXPECT_NE(notes.find("garbage_collection_threshold 0.6 recorded: it acts under a memory fraction"), std::string::npos)
      << notes;
  std::array<std::size_t, kRoundupIntervals> divisions{};
  divisions[1] = 4;  // "2": the [2, 4) MiB interval
  EXPECT_EQ(snap.recorded_config.roundup_power2_divisions, divisions);
  EXPECT_EQ(AllocatorConfig::parse(snap.recorded_config.to_string()), snap.recorded_config);
  doc["allocator_settings"]["roundup_power2_divisions"]["2"] = 3;
  EXPECT_NE(error_of(doc).find("is not an interval (MiB, a power of two) and its divisions"), std::string::npos);
  doc["allocator_settings"]["roundup_power2_divisions"]["2"] = 4;
  doc["allocator_settings"]["max_split_size"] = 5;
  EXPECT_NE(error_of(doc).find("a whole number of MiB from 20 MiB up, not 5"), std::string::npos) << error_of(doc);
  EXPECT_NE(notes.find("expandable_segments:True"), std::string::npos) << notes;
}

TEST(PytorchSnapshot, ATraceThatDoesNotAddUpIsRefusedNamingTheEvent) {
  EXPECT_NE(error_of(snapshot_of({ev("alloc", kA, 512), ev("alloc", kA, 512)}))
                .find("hand.json: device_traces[0][1]: alloc at " + std::to_string(kA) + ", which event 0 allocated"),
            std::string::npos);
  EXPECT_NE(error_of(snapshot_of({ev("alloc", kA, 512), ev("free_requested", kA, 512), ev("free_requested", kA, 512)}))
                .find("device_traces[0][2]: free of the block at " + std::to_string(kA) + ", which the trace already freed"),
            std::string::npos);
  EXPECT_NE(error_of(snapshot_of({ev("alloc", kA, 512), ev("free_requested", kA, 1024)})).find("allocated with 512"),
            std::string::npos);
  nlohmann::json no_addr = nlohmann::json::object();
  no_addr["action"] = "alloc";
  no_addr["size"] = 512;
  EXPECT_NE(error_of(snapshot_of({no_addr})).find("device_traces[0][0]: missing \"addr\""),
            std::string::npos);
  nlohmann::json negative = ev("alloc", kA, 512);
  negative["addr"] = -5;
  EXPECT_NE(error_of(snapshot_of({negative}))
                .find("\"addr\" must be a non-negative integer, not -5"),
            std::string::npos);
  // A block freed in the trace that no segment held.
  EXPECT_NE(error_of(snapshot_of({ev("free_requested", kA, 512)})).find("lies in no segment held before the trace"),
            std::string::npos)
      << error_of(snapshot_of({ev("free_requested", kA, 512)}));
  nlohmann::json events_only = nlohmann::json::object();
  events_only["events"] = nlohmann::json::array();
  EXPECT_NE(error_of(events_only).find("not a PyTorch memory snapshot"), std::string::npos);
  nlohmann::json bad_traces = nlohmann::json::object();
  bad_traces["device_traces"] = 3;
  EXPECT_NE(error_of(bad_traces).find("\"device_traces\" must be a list"), std::string::npos);
}

}  // namespace
}  // namespace trainmem
