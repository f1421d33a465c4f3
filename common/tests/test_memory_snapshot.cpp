// The snapshot has PyTorch's structure, and its trace replays to its segments: what PyTorch's
// memory visualizer relies on (it rebuilds the history by walking the trace from the segments).
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "common/allocator/host_device_memory.h"
#include "common/allocator/memory_snapshot.h"

namespace trainmem {
namespace {

// A small history: a 1000-byte activation and a 3 MiB parameter stay live, a 500-byte workspace
// block comes and goes, all in step 2 across two phases.
struct SnapshotHistory {
  BudgetDeviceMemory device{64 * MiB, false};
  CachingAllocator allocator{device};
  void* activation = nullptr;
  void* parameter = nullptr;
  void* workspace = nullptr;

  SnapshotHistory() {
    allocator.recorder().enable();
    allocator.recorder().set_step(2);
    allocator.recorder().set_phase("forward");
    activation = allocator.allocate(1000, MemoryCategory::activations);
    parameter = allocator.allocate(3 * MiB, MemoryCategory::parameters);
    allocator.recorder().set_phase("backward");
    workspace = allocator.allocate(500, MemoryCategory::workspace);
    allocator.free(workspace);
  }
  ~SnapshotHistory() {
    allocator.free(activation);
    allocator.free(parameter);
  }
};

std::uintptr_t addr(const void* p) { return reinterpret_cast<std::uintptr_t>(p); }

TEST(MemorySnapshot, SegmentsHavePyTorchsKeysAndTileExactly) {
  SnapshotHistory h;
  const nlohmann::json snap = memory_snapshot_json(h.allocator);
  ASSERT_TRUE(snap.contains("segments"));
  ASSERT_TRUE(snap.contains("device_traces"));
  const auto& segments = snap["segments"];
  ASSERT_EQ(segments.size(), 2u);  // one small (2 MiB) and one large (20 MiB) segment

  std::map<std::string, std::size_t> total_by_type;
  for (const auto& s : segments) {
    for (const char* key : {"device", "address", "total_size", "stream", "segment_type", "allocated_size",
                            "active_size", "requested_size", "is_expandable", "frames", "blocks"})
      EXPECT_TRUE(s.contains(key)) << key;
    total_by_type[s["segment_type"].get<std::string>()] = s["total_size"].get<std::size_t>();
    // Blocks tile the segment in address order; allocated_size is the sum of live blocks.
    std::uintptr_t next = s["address"].get<std::uintptr_t>();
    std::size_t live = 0, requested = 0;
    for (const auto& b : s["blocks"]) {
      for (const char* key : {"address", "size", "requested_size", "state", "frames", "category"})
        EXPECT_TRUE(b.contains(key)) << key;
      EXPECT_EQ(b["address"].get<std::uintptr_t>(), next);
      next += b["size"].get<std::size_t>();
      if (b["state"] == "active_allocated") {
        live += b["size"].get<std::size_t>();
        requested += b["requested_size"].get<std::size_t>();
      }
    }
    EXPECT_EQ(next, s["address"].get<std::uintptr_t>() + s["total_size"].get<std::size_t>());
    EXPECT_EQ(s["allocated_size"].get<std::size_t>(), live);
    EXPECT_EQ(s["requested_size"].get<std::size_t>(), requested);
  }
  EXPECT_EQ(total_by_type["small"], 2 * MiB);
  EXPECT_EQ(total_by_type["large"], 20 * MiB);
}

TEST(MemorySnapshot, TraceHasPyTorchsActionsAndOurCategoriesStepsPhases) {
  SnapshotHistory h;
  const nlohmann::json snap = memory_snapshot_json(h.allocator);
  ASSERT_EQ(snap["device_traces"].size(), 1u);  // one list per device
  const auto& trace = snap["device_traces"][0];
  const std::vector<std::string> actions = {"segment_alloc", "alloc",          "segment_alloc", "alloc",
                                            "alloc",         "free_requested", "free_completed"};
  ASSERT_EQ(trace.size(), actions.size());
  for (std::size_t i = 0; i < trace.size(); ++i) {
    EXPECT_EQ(trace[i]["action"], actions[i]) << i;
    EXPECT_EQ(trace[i]["seq"], i);
    EXPECT_EQ(trace[i]["step"], 2);
    EXPECT_TRUE(trace[i]["frames"].is_array());
    EXPECT_EQ(trace[i]["stream"], kDefaultStream);
  }
  EXPECT_EQ(trace[1]["addr"], addr(h.activation));
  EXPECT_EQ(trace[1]["size"], 1000u);        // what the caller asked for, as in PyTorch
  EXPECT_EQ(trace[1]["block_size"], 1024u);  // ours: the rounded block
  EXPECT_EQ(trace[1]["category"], "activations");
  EXPECT_EQ(trace[1]["phase"], "forward");
  EXPECT_EQ(trace[3]["size"], 3 * MiB);
  EXPECT_EQ(trace[3]["category"], "parameters");
  EXPECT_EQ(trace[4]["addr"], addr(h.workspace));
  EXPECT_EQ(trace[4]["phase"], "backward");
  EXPECT_EQ(trace[6]["addr"], addr(h.workspace));
  EXPECT_EQ(trace[0]["size"], 2 * MiB);  // segment: its size
  EXPECT_EQ(trace[2]["size"], 20 * MiB);
}

TEST(MemorySnapshot, ReplayingTheTraceGivesTheSegmentsAndTheirLiveBlocks) {
  SnapshotHistory h;
  // One more live block in the existing large segment, and an empty_cache that keeps both
  // segments (each holds a live block): the trace must still match.
  void* extra = h.allocator.allocate(2 * MiB, MemoryCategory::gradients);
  h.allocator.empty_cache();
  const nlohmann::json snap = memory_snapshot_json(h.allocator);

  std::map<std::uintptr_t, std::size_t> live_blocks, segments;  // address -> size
  for (const auto& e : snap["device_traces"][0]) {
    const std::string action = e["action"];
    const auto a = e["addr"].get<std::uintptr_t>();
    if (action == "alloc") live_blocks[a] = e["size"].get<std::size_t>();
    if (action == "free_completed") {
      EXPECT_EQ(live_blocks.erase(a), 1u);
    }
    if (action == "segment_alloc") segments[a] = e["size"].get<std::size_t>();
    if (action == "segment_free") {
      EXPECT_EQ(segments.erase(a), 1u);
    }
  }
  std::map<std::uintptr_t, std::size_t> snapshot_live, snapshot_segments;
  for (const auto& s : snap["segments"]) {
    snapshot_segments[s["address"].get<std::uintptr_t>()] = s["total_size"].get<std::size_t>();
    for (const auto& b : s["blocks"])
      if (b["state"] == "active_allocated") snapshot_live[b["address"].get<std::uintptr_t>()] = b["requested_size"].get<std::size_t>();
  }
  EXPECT_EQ(live_blocks, snapshot_live);
  EXPECT_EQ(segments, snapshot_segments);
  EXPECT_EQ(live_blocks.size(), 3u);
  h.allocator.free(extra);
}

TEST(MemorySnapshot, WithoutRecordingTheTraceIsEmptyButTheSegmentsAreThere) {
  BudgetDeviceMemory device(64 * MiB, false);
  CachingAllocator allocator(device);
  void* p = allocator.allocate(4096);
  const nlohmann::json snap = memory_snapshot_json(allocator);
  EXPECT_EQ(snap["segments"].size(), 1u);
  ASSERT_EQ(snap["device_traces"].size(), 1u);
  EXPECT_TRUE(snap["device_traces"][0].empty());
  allocator.free(p);
}

TEST(MemorySnapshot, WritesAFileAndSaysWhenItCannot) {
  SnapshotHistory h;
  const std::string path = ::testing::TempDir() + "/trainmem_snapshot.json";
  write_memory_snapshot(h.allocator, path);
  std::ifstream in(path);
  const nlohmann::json j = nlohmann::json::parse(in);
  EXPECT_EQ(j, memory_snapshot_json(h.allocator));
  std::remove(path.c_str());
  EXPECT_THROW(write_memory_snapshot(h.allocator, "/nonexistent-dir/snapshot.json"), std::runtime_error);
}

}  // namespace
}  // namespace trainmem
