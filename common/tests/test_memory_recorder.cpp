// The recorder logs, in order, every event that changes device memory, with step and phase.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

#include <nlohmann/json.hpp>

#include "common/allocator/caching_allocator.h"
#include "common/allocator/host_device_memory.h"

namespace trainmem {
namespace {

TEST(MemoryRecorder, IsOffByDefault) {
  BudgetDeviceMemory device(GiB, false);
  CachingAllocator a(device);
  a.free(a.allocate(1000));
  EXPECT_TRUE(a.recorder().events().empty());
}

TEST(MemoryRecorder, LogsEveryEventWithStepAndPhase) {
  BudgetDeviceMemory device(64 * MiB, false);
  CachingAllocator a(device);
  a.recorder().enable();
  a.recorder().set_step(3);
  a.recorder().set_phase("forward");
  void* p = a.allocate(1000, MemoryCategory::activations);
  a.recorder().set_phase("backward");
  a.free(p);
  a.empty_cache();
  EXPECT_THROW(a.allocate(100 * MiB, MemoryCategory::gradients), OutOfMemoryError);

  const auto& ev = a.recorder().events();
  const std::vector<TraceAction> expected = {TraceAction::segment_alloc, TraceAction::alloc,
                                             TraceAction::free_requested, TraceAction::free_completed,
                                             TraceAction::segment_free, TraceAction::oom};
  ASSERT_EQ(ev.size(), expected.size());
  for (std::size_t i = 0; i < ev.size(); ++i) {
    EXPECT_EQ(ev[i].action, expected[i]) << i;
    EXPECT_EQ(ev[i].seq, i);
    EXPECT_EQ(ev[i].step, 3);
  }
  EXPECT_EQ(ev[0].size, 2 * MiB);  // the segment
  EXPECT_EQ(ev[1].size, 1000u);    // what the caller asked for
  EXPECT_EQ(ev[1].block_size, 1024u);
  EXPECT_EQ(ev[1].category, MemoryCategory::activations);
  EXPECT_EQ(ev[1].address, reinterpret_cast<std::uintptr_t>(p));
  EXPECT_EQ(a.recorder().phases()[ev[1].phase], "forward");
  EXPECT_EQ(a.recorder().phases()[ev[2].phase], "backward");
  EXPECT_EQ(ev[5].size, 100 * MiB);
  EXPECT_EQ(ev[5].category, MemoryCategory::gradients);

  const std::string path = ::testing::TempDir() + "/trainmem_trace.json";
  a.recorder().write_json(path);
  std::ifstream in(path);
  const nlohmann::json j = nlohmann::json::parse(in);
  ASSERT_EQ(j["events"].size(), expected.size());
  EXPECT_EQ(j["events"][1]["action"], "alloc");
  EXPECT_EQ(j["events"][1]["category"], "activations");
  EXPECT_EQ(j["events"][1]["phase"], "forward");
  EXPECT_EQ(j["events"][5]["action"], "oom");
  std::remove(path.c_str());
}

TEST(MemoryRecorder, WritingToAnImpossiblePathIsAClearError) {
  MemoryRecorder r;
  EXPECT_THROW(r.write_json("/nonexistent-dir/trace.json"), std::runtime_error);
}

}  // namespace
}  // namespace trainmem
