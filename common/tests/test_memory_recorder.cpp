// The recorder logs, in order, every event that changes device memory, with step and phase.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <new>

#include <nlohmann/json.hpp>

#include "common/allocator/caching_allocator.h"
#include "common/allocator/host_device_memory.h"
#include "common/allocator/trace_file.h"
#include "common/tensor/tensor.h"

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
  const std::string path = ::testing::TempDir() + "/trainmem_trace.json";
  std::remove(path.c_str());
  TraceFileWriter file(a.recorder(), path);
  void* p = a.allocate(1000, MemoryCategory::activations);
  a.recorder().set_phase("backward");
  a.free(p);
  a.empty_cache();
  EXPECT_THROW(a.allocate(100 * MiB, MemoryCategory::gradients), OutOfMemoryError);

  const auto& ev = a.recorder().events();
  const std::vector<TraceAction> expected = {TraceAction::segment_alloc, TraceAction::alloc,
                                             TraceAction::free_requested, TraceAction::free_completed,
                                             TraceAction::empty_cache, TraceAction::segment_free, TraceAction::oom};
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
  EXPECT_EQ(ev[6].size, 100 * MiB);
  EXPECT_EQ(ev[6].category, MemoryCategory::gradients);

  // The file: streamed as the events came, and there only once finished (whole or not at all).
  EXPECT_FALSE(std::filesystem::exists(path));
  file.finish();
  std::ifstream in(path);
  const nlohmann::json j = nlohmann::json::parse(in);
  ASSERT_EQ(j["events"].size(), expected.size());
  EXPECT_EQ(j["events"][1]["action"], "alloc");
  EXPECT_EQ(j["events"][1]["category"], "activations");
  EXPECT_EQ(j["events"][1]["phase"], "forward");
  EXPECT_EQ(j["events"][4]["action"], "empty_cache");
  EXPECT_EQ(j["events"][6]["action"], "oom");
  EXPECT_EQ(j["phases"], nlohmann::json({"none", "forward", "backward"}));
  std::remove(path.c_str());
}

// Recording a long run holds at most max_entries() events in memory (PyTorch's max_entries: the
// last ones), however many happen; with max_entries 0 a sink sees every event and none is kept.
TEST(MemoryRecorder, HoldsAtMostMaxEntriesEventsOverAnyNumberOfSteps) {
  BudgetDeviceMemory device(64 * MiB, false);
  CachingAllocator a(device);
  a.recorder().enable();
  a.recorder().set_max_entries(100);
  struct Counter : TraceSink {
    std::uint64_t seen = 0;
    void write(const TraceEvent&, const MemoryRecorder&) override { ++seen; }
  } counter;
  a.recorder().set_sink(&counter);
  constexpr int kSteps = 10000;
  for (int step = 0; step < kSteps; ++step) {
    a.recorder().set_step(step);
    a.free(a.allocate(1000, MemoryCategory::activations));  // alloc, free_requested, free_completed
    ASSERT_LE(a.recorder().events().size(), 100u) << "step " << step;
  }
  const std::uint64_t recorded = a.recorder().events_recorded();
  EXPECT_EQ(recorded, 1u + 3u * kSteps);  // the first segment, then three events a step
  EXPECT_EQ(counter.seen, recorded);
  ASSERT_EQ(a.recorder().events().size(), 100u);
  EXPECT_EQ(a.recorder().events().front().seq, recorded - 100) << "the last 100 are kept";
  EXPECT_EQ(a.recorder().events().back().seq, recorded - 1);
  EXPECT_EQ(a.recorder().events().back().step, kSteps - 1);
  EXPECT_EQ(a.recorder().max_event_bytes(), 100 * sizeof(TraceEvent) + 1024);

  a.recorder().set_max_entries(0);
  EXPECT_TRUE(a.recorder().events().empty());
  a.free(a.allocate(1000));
  EXPECT_TRUE(a.recorder().events().empty());
  EXPECT_EQ(counter.seen, recorded + 3);
  a.recorder().set_sink(nullptr);
}

// Recording must never throw out of the allocator: a tensor frees its block in its destructor,
// where an exception ends the program (std::terminate, exit 134). A failure to keep or write an
// event (here: the sink runs out of host memory inside a free) stops the recorder; the free takes
// effect, and throw_if_failed() says what happened at a safe point.
TEST(MemoryRecorder, AFailureInsideAFreeStopsRecordingAndDoesNotThrow) {
  BudgetDeviceMemory device(64 * MiB, false);
  CachingAllocator a(device);
  a.recorder().enable();
  struct FailingSink : TraceSink {
    void write(const TraceEvent& e, const MemoryRecorder&) override {
      if (e.action == TraceAction::free_requested) throw std::bad_alloc();
    }
  } failing;
  a.recorder().set_sink(&failing);
  {
    Tensor t(a, {256}, DType::f32, MemoryCategory::activations, "t");
    EXPECT_EQ(a.stats().allocated_bytes[0].current, 1024);
  }  // ~Tensor frees: noexcept
  EXPECT_EQ(a.stats().allocated_bytes[0].current, 0) << "the free took effect";
  EXPECT_TRUE(a.recorder().failed());
  EXPECT_FALSE(a.recorder().enabled());
  try {
    a.recorder().throw_if_failed();
    ADD_FAILURE() << "no RecordingError";
  } catch (const RecordingError& e) {
    EXPECT_NE(std::string(e.what()).find("stopped at event 2: the host ran out of memory"), std::string::npos) << e.what();
  }
  const std::uint64_t recorded = a.recorder().events_recorded();
  a.free(a.allocate(1000));  // the allocator goes on; the recorder stays off
  EXPECT_EQ(a.recorder().events_recorded(), recorded);
  a.recorder().enable();
  EXPECT_FALSE(a.recorder().enabled()) << "a failed recording is not resumed: its log would have a gap";
  a.recorder().set_sink(nullptr);
}

// A file that cannot be written while the run goes (here /dev/full: no space) stops the recorder
// with the writer's message, and finish() refuses to complete a log with a gap.
TEST(MemoryRecorder, AWriteErrorWhileStreamingStopsTheRecorderWithItsMessage) {
  BudgetDeviceMemory device(GiB, false);
  CachingAllocator a(device);
  a.recorder().enable();
  a.recorder().set_max_entries(0);
  TraceFileWriter file(a.recorder(), "/dev/full", "--record-memory");
  for (int i = 0; i < 20000 && !a.recorder().failed(); ++i) a.free(a.allocate(1000));  // > 1 MiB of events
  ASSERT_TRUE(a.recorder().failed());
  EXPECT_NE(a.recorder().failure().find("cannot write --record-memory /dev/full: No space left on device"),
            std::string::npos)
      << a.recorder().failure();
  EXPECT_THROW(file.finish(), RecordingError);
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
  EXPECT_EQ(r.event_json(r.events()[1])["name"], "h0.attn.probs");
  EXPECT_FALSE(r.event_json(r.events()[7]).contains("name"));
}

TEST(MemoryRecorder, WritingToAnImpossiblePathIsAClearError) {
  MemoryRecorder r;
  EXPECT_THROW(TraceFileWriter(r, "/nonexistent-dir/trace.json"), OutputFileError);
  EXPECT_EQ(r.sink(), nullptr);
}

// The list of actions is said once: each name reads back as its action, and nothing else does.
TEST(MemoryRecorder, EveryActionNameReadsBackAsItsAction) {
  for (const TraceActionName& a : kTraceActions) {
    EXPECT_EQ(parse_trace_action(a.name), a.action) << a.name;
    EXPECT_EQ(to_string(a.action), a.name);
  }
  EXPECT_EQ(parse_trace_action("free"), std::nullopt);
  EXPECT_EQ(parse_trace_action(""), std::nullopt);
}

}  // namespace
}  // namespace trainmem
