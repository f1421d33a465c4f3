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

// A tensor's name follows its block: alloc, both frees and an OOM carry it (each name is kept
// once), an unnamed request carries none, and the OOM report names the tensor too. (The cached
// segment is given back before the OOM: the retry of step 4.)
TEST(MemoryRecorder, EventsAndTheOomReportNameTheTensor) {
  BudgetDeviceMemory device(64 * MiB, false);
  CachingAllocator a(device);
  a.recorder().enable();
  void* p = a.allocate(1000, MemoryCategory::activations, kDefaultStream, "h0.attn.probs");
  a.free(p);
  a.free(a.allocate(1000, MemoryCategory::activations, kDefaultStream, "h0.attn.probs"));
  a.free(a.allocate(1000));
  try {
    a.allocate(100 * MiB, MemoryCategory::gradients, kDefaultStream, "wte.grad");
    ADD_FAILURE() << "no OutOfMemoryError";
  } catch (const OutOfMemoryError& e) {
    EXPECT_EQ(e.report().tensor, "wte.grad");
    EXPECT_NE(std::string(e.what()).find("for gradients (wte.grad)."), std::string::npos) << e.what();
  }
  const MemoryRecorder& r = a.recorder();
  EXPECT_EQ(r.names(), (std::vector<std::string>{"", "h0.attn.probs", "wte.grad"}));
  std::vector<std::string> named;
  for (const TraceEvent& e : r.events()) named.push_back(std::string(to_string(e.action)) + ":" + r.names()[e.name]);
  EXPECT_EQ(named, (std::vector<std::string>{"segment_alloc:", "alloc:h0.attn.probs", "free_requested:h0.attn.probs",
                                             "free_completed:h0.attn.probs", "alloc:h0.attn.probs",
                                             "free_requested:h0.attn.probs", "free_completed:h0.attn.probs", "alloc:",
                                             "free_requested:", "free_completed:", "segment_free:", "oom:wte.grad"}));
  const nlohmann::json j = r.to_json();
  EXPECT_EQ(j["events"][1]["name"], "h0.attn.probs");
  EXPECT_FALSE(j["events"][7].contains("name"));
}

TEST(MemoryRecorder, WritingToAnImpossiblePathIsAClearError) {
  MemoryRecorder r;
  EXPECT_THROW(r.write_json("/nonexistent-dir/trace.json"), std::runtime_error);
}

}  // namespace
}  // namespace trainmem
