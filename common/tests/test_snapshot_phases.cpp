// The phases of a snapshot's events (common/allocator/snapshot_phases.h) from each of the three
// sources: record_function ranges (external_annotations by time, and PyTorch 2.4's user_defined
// events), stack frames (the real snapshot's, and hand-made ones), trainmem's own phases (a
// recorded allocator round trip); the steps, recorded or counted; the peaks placed in their phase;
// and the timeline's bound (common/allocator/memory_timeline.h).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/allocator/host_device_memory.h"
#include "common/allocator/memory_snapshot.h"
#include "common/allocator/memory_timeline.h"
#include "common/allocator/pytorch_snapshot.h"
#include "common/allocator/snapshot_phases.h"
#include "common/util/restricted_pickle.h"

// (a namespace of its own: the unity build puts this file beside test_pytorch_snapshot.cpp)
namespace trainmem::snapshot_phases_test {
namespace {

using List = std::vector<nlohmann::json>;  // (a one-element braced list is an element under clang)
constexpr std::uint64_t kA = std::uint64_t{1} << 30;

nlohmann::json frame(const char* name, const char* file) { return {{"name", name}, {"filename", file}, {"line", 1}}; }

nlohmann::json event(const char* action, std::uint64_t addr, std::uint64_t size, std::int64_t time_us,
                     const List& frames = {}) {
  return {{"action", action}, {"addr", addr}, {"size", size}, {"stream", 0}, {"time_us", time_us}, {"frames", nlohmann::json(frames)}};
}

nlohmann::json annotation(const char* name, const char* stage, std::int64_t time_us, int device = 0) {
  return {{"name", name}, {"stage", stage}, {"device", device}, {"time_us", time_us}};
}

nlohmann::json snapshot_of(const List& events, const List& annotations = {}) {
  nlohmann::json doc = nlohmann::json::object();
  doc["segments"] = nlohmann::json::array();
  doc["device_traces"] = nlohmann::json::array();
  doc["device_traces"].push_back(nlohmann::json(events));
  if (!annotations.empty()) doc["external_annotations"] = nlohmann::json(annotations);
  return doc;
}

std::vector<std::string> phase_list(const SnapshotPhases& p) {
  std::vector<std::string> names;
  for (std::size_t i = 0; i < p.phase.size(); ++i) names.push_back(p.phase_of(i));
  return names;
}

TEST(SnapshotPhases, RangeNamesAreTheStepsPhases) {
  EXPECT_EQ(phase_of_range_name("Optimizer.step#AdamW.step"), "optimizer");
  EXPECT_EQ(phase_of_range_name("Optimizer.zero_grad#SGD.zero_grad"), "zero_grad");
  EXPECT_EQ(phase_of_range_name("## forward ##"), "forward");
  EXPECT_EQ(phase_of_range_name("Backward pass"), "backward");
  EXPECT_EQ(phase_of_range_name("ProfilerStep#3"), std::nullopt);
  EXPECT_EQ(phase_of_range_name("load batch"), std::nullopt);
}

TEST(SnapshotPhases, FramesShowThePhase) {
  const char* site = "/venv/lib/python3.11/site-packages/";
  const std::string module = std::string(site) + "torch/nn/modules/module.py";
  const std::string conv = std::string(site) + "torch/nn/modules/conv.py";
  const std::string adam = std::string(site) + "torch/optim/adam.py";
  const std::string grad = std::string(site) + "torch/autograd/__init__.py";
  EXPECT_EQ(phase_of_frames(nlohmann::json(List{frame("_conv_forward", conv.c_str()), frame("_call_impl", module.c_str()),
                                                frame("train", "/home/me/train.py")})),
            "forward");
  // Autograd's own thread: C++ frames only.
  EXPECT_EQ(phase_of_frames(nlohmann::json(List{frame("c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc", ""),
                                                frame("torch::autograd::Engine::evaluate_function(...)", "??")})),
            "backward");
  EXPECT_EQ(phase_of_frames(nlohmann::json(List{frame("_make_grads", grad.c_str()), frame("train", "/home/me/train.py")})),
            "backward");
  EXPECT_EQ(phase_of_frames(nlohmann::json(List{frame("_multi_tensor_adam", adam.c_str()), frame("step", adam.c_str())})),
            "optimizer");
  EXPECT_EQ(phase_of_frames(nlohmann::json(List{frame("zero_grad", (std::string(site) + "torch/optim/optimizer.py").c_str())})),
            "zero_grad");
  // A Windows path, and a backward called inside a module's forward (the backward decides).
  EXPECT_EQ(phase_of_frames(nlohmann::json(List{frame("_make_grads", "C:\\py\\Lib\\site-packages\\torch\\autograd\\__init__.py"),
                                                frame("forward", "C:\\me\\model.py")})),
            "backward");
  EXPECT_EQ(phase_of_frames(nlohmann::json(List{frame("main", "/home/me/train.py")})), std::nullopt);
  EXPECT_EQ(phase_of_frames(nlohmann::json::array()), std::nullopt);
  EXPECT_EQ(phase_of_frames(nlohmann::json("not a list")), std::nullopt);
}

TEST(SnapshotPhases, ExternalAnnotationsPlaceEventsByTime) {
  // ProfilerStep#7 holds a forward range (t 10-20), then Optimizer.step (t 30-40); step 8 begins at 50.
  const List events = {event("alloc", kA, 512, 5),             // 0: in step 7, before any phase range
                       event("alloc", kA + 512, 512, 10),      // 1: the forward's START at its own microsecond: inside
                       event("free_requested", kA, 512, 15),   // 2
                       event("free_completed", kA, 512, 20),   // 3: the forward's END at its microsecond: still inside
                       event("alloc", kA, 512, 25),            // 4: in step 7, no phase range: the one before's
                       event("alloc", kA + 1024, 512, 35),     // 5: the optimizer
                       event("alloc", kA + 1536, 512, 55)};    // 6: step 8, in a range of the program's own
  const List annotations = {annotation("ProfilerStep#7", "START", 1), annotation("## forward ##", "START", 10),
                            annotation("## forward ##", "END", 20),    annotation("Optimizer.step#AdamW.step", "START", 30),
                            annotation("Optimizer.step#AdamW.step", "END", 40), annotation("ProfilerStep#7", "END", 45),
                            annotation("ProfilerStep#8", "START", 50),  annotation("load batch", "START", 52),
                            annotation("ignored: device 1", "START", 0, 1)};
  const SnapshotPhases p = snapshot_phases(snapshot_of(events, annotations), 0);
  EXPECT_EQ(phase_list(p), (std::vector<std::string>{"unknown", "forward", "forward", "forward", "forward", "optimizer",
                                                     "load batch"}));
  EXPECT_EQ(p.step, (std::vector<std::uint32_t>{7, 7, 7, 7, 7, 7, 8}));
  EXPECT_FALSE(p.steps_counted);
  EXPECT_EQ(p.sources, std::vector<std::string>{"record_function ranges"});
  const std::vector<SnapshotPhases::Span> spans = p.spans();
  ASSERT_EQ(spans.size(), 4u);
  EXPECT_EQ(spans[1].first_event, 1u);
  EXPECT_EQ(spans[1].last_event, 4u);
  EXPECT_EQ(p.names[spans[2].phase], "optimizer");
}

TEST(SnapshotPhases, PyTorch24RangesInsideTheTraceCount) {
  auto range = [](const char* stage, const char* name) {
    return nlohmann::json{{"action", "user_defined"}, {"addr", 0}, {"size", 0}, {"stream", 0},
                          {"frames", List{{{"name", stage}, {"filename", name}, {"line", 0}}}}};
  };
  const List events = {range("START", "## backward ##"), event("alloc", kA, 512, 0), range("END", "## backward ##"),
                       event("free_requested", kA, 512, 0), event("free_completed", kA, 512, 0)};
  const nlohmann::json doc = snapshot_of(events);
  const SnapshotPhases p = snapshot_phases(doc, 0);
  EXPECT_EQ(p.phase_of(1), "backward");
  EXPECT_EQ(p.phase_of(3), "backward");  // after the range, nothing says otherwise
  EXPECT_EQ(p.sources, std::vector<std::string>{"record_function ranges"});
  // The reader passes over them as markers: nothing named as not followed.
  const PytorchSnapshot snap = read_pytorch_snapshot(doc, "hand.json");
  EXPECT_TRUE(snap.not_followed.empty()) << snap.not_followed.front().text;
  EXPECT_EQ(snap.phases.phase_of(1), "backward");
}

TEST(SnapshotPhases, StepsAreCountedFromTheOptimizerWhenNotRecorded) {
  const char* adam = "/py/torch/optim/adam.py";
  const char* module = "/py/torch/nn/modules/module.py";
  List events;
  for (int step = 0; step < 3; ++step) {
    events.push_back(event("alloc", kA, 512, 0, {frame("forward", module)}));
    events.push_back(event("free_requested", kA, 512, 0, {frame("torch::autograd::Engine::thread_main", "??")}));
    events.push_back(event("free_completed", kA, 512, 0));
    events.push_back(event("alloc", kA, 512, 0, {frame("step", adam)}));
    events.push_back(event("free_requested", kA, 512, 0, {frame("zero_grad", "/py/torch/optim/optimizer.py")}));
  }
  const SnapshotPhases p = snapshot_phases(snapshot_of(events), 0);
  EXPECT_TRUE(p.steps_counted);
  EXPECT_EQ(p.sources, std::vector<std::string>{"stack frames"});
  EXPECT_EQ(phase_list(p).at(7), "backward");  // a free_completed: the phase before it
  for (std::size_t i = 0; i < events.size(); ++i) EXPECT_EQ(p.step_of(i), i / 5 + 1) << "event " << i;
}

TEST(SnapshotPhases, AHostileFileSaysNothingRatherThanFailing) {
  nlohmann::json doc = snapshot_of({event("alloc", kA, 512, 3)});
  doc["external_annotations"] = nlohmann::json(List{nlohmann::json(7), {{"name", 3}}, {{"stage", "START"}}});
  const SnapshotPhases p = snapshot_phases(doc, 0);
  EXPECT_EQ(phase_list(p), std::vector<std::string>{"unknown"});
  EXPECT_TRUE(p.sources.empty());
  EXPECT_TRUE(snapshot_phases(nlohmann::json("x"), 0).phase.empty());
  EXPECT_TRUE(snapshot_phases(doc, 3).phase.empty());
}

TEST(SnapshotPhases, RealSnapshotsPhasesComeFromItsFrames) {
  // Read independently of trainmem (a restricted Python unpickler over the same file): event 120
  // is the first of autograd's thread, 575 Adam's _init_group, 583 the next forward's first conv;
  // the recording holds 10 optimizer steps, the first 3 events in the program's own code.
  const nlohmann::json doc = read_restricted_pickle_file(std::string(TRAINMEM_TEST_DATA_DIR) + "/snapshots/small-cnn-training.pickle");
  const PytorchSnapshot snap = read_pytorch_snapshot(doc, "small-cnn-training.pickle");
  const SnapshotPhases& p = snap.phases;
  EXPECT_EQ(p.sources, std::vector<std::string>{"stack frames"});
  EXPECT_EQ(p.phase_of(0), "unknown");
  EXPECT_EQ(p.phase_of(3), "forward");
  EXPECT_EQ(p.phase_of(120), "backward");
  EXPECT_EQ(p.phase_of(575), "optimizer");
  EXPECT_EQ(p.phase_of(583), "forward");
  EXPECT_EQ(p.step_of(583), 2u);
  EXPECT_EQ(p.step_of(snap.events - 1), 10u);
  std::size_t optimizer_spans = 0;
  for (const SnapshotPhases::Span& s : p.spans()) optimizer_spans += p.names[s.phase] == "optimizer";
  EXPECT_EQ(optimizer_spans, 10u);

  // The recorded peaks, placed: the overall peaks are the snapshot's figures, and each is some
  // phase's own peak.
  const PhasePeaks& peaks = snap.recorded.memory.peaks;
  EXPECT_EQ(peaks.overall().reserved, 134217728);
  EXPECT_EQ(peaks.overall().allocated, 108258676);  // (requested bytes: the trace's sizes)
  ASSERT_TRUE(peaks.overall().reserved_event);
  const std::uint16_t at_peak = p.phase[*peaks.overall().reserved_event];
  EXPECT_EQ(peaks.of(at_peak).reserved, 134217728);
  std::size_t counted = 0;
  for (std::uint16_t k = 0; k < p.names.size(); ++k) counted += peaks.of(k).events;
  EXPECT_EQ(counted + 9, snap.events);  // every event but the 9 `snapshot` markers
}

TEST(SnapshotPhases, TrainmemsOwnPhasesRoundTrip) {
  BudgetDeviceMemory card(64 << 20, false);
  CachingAllocator allocator(card);
  allocator.recorder().enable();
  allocator.recorder().set_step(1);
  allocator.recorder().set_phase("forward");
  void* a = allocator.allocate(1 << 20, MemoryCategory::activations);
  void* b = allocator.allocate(3 << 20, MemoryCategory::activations);
  allocator.recorder().set_phase("backward");
  allocator.free(b);
  void* g = allocator.allocate(1 << 20, MemoryCategory::gradients);
  allocator.recorder().set_phase("optimizer");
  allocator.free(a);
  allocator.free(g);
  const nlohmann::json doc = memory_snapshot_json(allocator);
  const PytorchSnapshot snap = read_pytorch_snapshot(doc, "own.json");
  EXPECT_EQ(snap.phases.sources, std::vector<std::string>{"trainmem's phases"});
  EXPECT_FALSE(snap.phases.steps_counted);
  const nlohmann::json& events = doc["device_traces"][0];
  for (std::size_t i = 0; i < events.size(); ++i) {
    EXPECT_EQ(snap.phases.phase_of(i), events[i]["phase"].get<std::string>()) << "event " << i;
    EXPECT_EQ(snap.phases.step_of(i), 1u);
  }
  // Each phase's peak requested after its events: the forward's both activations (4 MiB), the
  // backward's a and g (2 MiB, after b's free), the optimizer's g alone (after a's free).
  const PhasePeaks& peaks = snap.recorded.memory.peaks;
  std::uint16_t forward = 0, backward = 0, optimizer = 0;
  for (std::uint16_t k = 0; k < snap.phases.names.size(); ++k) {
    if (snap.phases.names[k] == "forward") forward = k;
    if (snap.phases.names[k] == "backward") backward = k;
    if (snap.phases.names[k] == "optimizer") optimizer = k;
  }
  EXPECT_EQ(peaks.of(forward).allocated, 4 << 20);
  EXPECT_EQ(peaks.of(backward).allocated, 2 << 20);
  EXPECT_EQ(peaks.of(optimizer).allocated, 1 << 20);
  EXPECT_EQ(peaks.overall().allocated, allocator.stats().requested_bytes[0].peak);
}

TEST(MemoryTimeline, KeepsEachRunsLargestValueAtABoundedNumberOfPoints) {
  MemoryTimeline t(10, 3);  // runs of 4 events: 0-3, 4-7, 8-9
  const std::int64_t allocated[10] = {1, 5, 2, 0, 3, 3, 9, 1, 4, 2};
  for (std::size_t i = 0; i < 10; ++i) t.add(i, allocated[i], 10 * allocated[i]);
  t.shift(100, 1000);
  const nlohmann::json j = t.to_json("allocated_bytes");
  EXPECT_EQ(j["event"], nlohmann::json(std::vector<int>{0, 4, 8}));
  EXPECT_EQ(j["allocated_bytes"], nlohmann::json(std::vector<int>{105, 109, 104}));
  EXPECT_EQ(j["reserved_bytes"], nlohmann::json(std::vector<int>{1050, 1090, 1040}));

  MemoryTimeline many(1'000'003, 1000);
  for (std::size_t i = 0; i < 1'000'003; i += 7) many.add(i, static_cast<std::int64_t>(i), 0);
  EXPECT_LE(many.size(), 1000u);
  EXPECT_EQ(many.to_json("a")["a"].back(), (1'000'003 - 1) / 7 * 7);  // the last run's largest
}

}  // namespace
}  // namespace trainmem::snapshot_phases_test
