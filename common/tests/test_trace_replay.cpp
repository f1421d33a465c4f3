// Trace replay: parsing (every malformed input gives a TraceError naming the event and the
// problem), a replay whose statistics are worked out by hand from the allocator's rules
// (ANCHORS.md), an OOM in the middle of a trace, and the shape of the JSON result.
#include <gtest/gtest.h>

#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/allocator/host_device_memory.h"
#include "common/allocator/trace_file.h"
#include "common/allocator/trace_replay.h"
#include "common/tests/allocator_test_util.h"

namespace trainmem::test {
namespace {

const std::string kDataDir = TRAINMEM_TEST_DATA_DIR;

// The message of the TraceError that parsing `text` throws ("" if it parses).
std::string trace_error(const std::string& text) {
  try {
    parse_trace(nlohmann::json::parse(text), "t.json");
  } catch (const TraceError& e) {
    return e.what();
  }
  return "";
}

std::string trace_file_error(const std::string& path) {
  try {
    parse_trace_file(path);
  } catch (const TraceError& e) {
    return e.what();
  }
  return "";
}

// A replay on a simulated card of `budget` bytes.
struct Replay {
  explicit Replay(const std::string& trace_text, std::size_t budget = GiB, const char* config = "")
      : device(budget, /*backed=*/false), allocator(device, AllocatorConfig::parse(config)) {
    result = replay_trace(parse_trace(nlohmann::json::parse(trace_text)), allocator);
  }
  BudgetDeviceMemory device;
  CachingAllocator allocator;
  ReplayResult result;
};

// --- Parsing

TEST(TraceParse, AcceptsAListOrAnEventsObjectWithDefaults) {
  const auto ops = parse_trace(nlohmann::json::parse(R"([
      {"action": "alloc", "id": 3, "size": 100},
      {"action": "alloc", "id": 4, "size": 0, "category": "gradients", "stream": 7},
      {"action": "free", "id": 3},
      {"action": "empty_cache"}])"));
  ASSERT_EQ(ops.size(), 4u);
  EXPECT_EQ(ops[0].action, TraceOp::Action::alloc);
  EXPECT_EQ(ops[0].id, 3);
  EXPECT_EQ(ops[0].size, 100u);
  EXPECT_EQ(ops[0].category, MemoryCategory::other);  // the defaults
  EXPECT_EQ(ops[0].stream, kDefaultStream);
  EXPECT_EQ(ops[1].category, MemoryCategory::gradients);
  EXPECT_EQ(ops[1].stream, StreamId{7});
  EXPECT_EQ(ops[2].action, TraceOp::Action::free);
  EXPECT_EQ(ops[3].action, TraceOp::Action::empty_cache);

  const auto wrapped = parse_trace(nlohmann::json::parse(R"({"events": [{"action": "alloc", "id": 1, "size": 8}]})"));
  ASSERT_EQ(wrapped.size(), 1u);
  EXPECT_EQ(wrapped[0].size, 8u);
  EXPECT_TRUE(parse_trace(nlohmann::json::parse("[]")).empty());
}

TEST(TraceParse, IdsMayBeReusedAfterTheirFree) {
  EXPECT_EQ(trace_error(R"([{"action": "alloc", "id": 1, "size": 8}, {"action": "free", "id": 1},
                            {"action": "alloc", "id": 1, "size": 8}])"),
            "");
}

TEST(TraceParse, TopLevelMustBeAListOrAnEventsObject) {
  EXPECT_NE(trace_error("42").find("t.json: expected a list of events"), std::string::npos) << trace_error("42");
  EXPECT_NE(trace_error(R"({"evnts": []})").find("without \"events\""), std::string::npos);
  EXPECT_NE(trace_error(R"({"events": "x"})").find("found string"), std::string::npos);
}

TEST(TraceParse, EachBadEventIsNamedWithItsIndex) {
  struct Case {
    const char* trace;
    const char* expected;  // a part of the message
  };
  const Case cases[] = {
      {R"([17])", "t.json: event 0: expected an object, found number"},
      {R"([{"id": 1, "size": 8}])", "event 0: missing \"action\""},
      {R"([{"action": 3, "id": 1, "size": 8}])", "event 0: \"action\" must be a string"},
      {R"([{"action": "malloc", "id": 1, "size": 8}])", "event 0: unknown action \"malloc\""},
      {R"([{"action": "alloc", "size": 8}])", "event 0: missing \"id\""},
      {R"([{"action": "alloc", "id": -1, "size": 8}])", "event 0: \"id\" must be a non-negative integer, not -1"},
      {R"([{"action": "alloc", "id": 1.5, "size": 8}])", "\"id\" must be a non-negative integer, not 1.5"},
      {R"([{"action": "alloc", "id": "1", "size": 8}])", "\"id\" must be a non-negative integer, not \"1\""},
      {R"([{"action": "alloc", "id": 1}])", "event 0: missing \"size\""},
      {R"([{"action": "alloc", "id": 1, "size": -8}])", "\"size\" must be a non-negative integer, not -8"},
      {R"([{"action": "alloc", "id": 1, "size": 2.5}])", "\"size\" must be a non-negative integer"},
      {R"([{"action": "alloc", "id": 1, "size": 8, "category": "weights"}])", "event 0: unknown category \"weights\""},
      {R"([{"action": "alloc", "id": 1, "size": 8, "stream": -2}])", "\"stream\" must be a non-negative integer"},
      {R"([{"action": "alloc", "id": 1, "size": 8}, {"action": "alloc", "id": 1, "size": 8}])",
       "event 1: alloc of id 1 which is already allocated"},
      {R"([{"action": "alloc", "id": 1, "size": 8}, {"action": "free", "id": 1}, {"action": "free", "id": 5}])",
       "t.json: event 2: free of id 5 which is not allocated"},
      {R"([{"action": "free"}])", "event 0: missing \"id\""},
  };
  for (const Case& c : cases) {
    const std::string message = trace_error(c.trace);
    EXPECT_NE(message.find(c.expected), std::string::npos) << c.trace << "\n  gave: '" << message << "'";
    EXPECT_EQ(message.find('\n'), std::string::npos) << "one line: " << message;
  }
}

TEST(TraceParse, FileErrorsNameTheFile) {
  const std::string missing = kDataDir + "/no_such_trace.json";
  EXPECT_EQ(trace_file_error(missing), missing + ": no such file");

  EXPECT_NE(trace_file_error(kDataDir).find("is a directory"), std::string::npos);

  // not_json.json misses a comma on line 2; nlohmann's position is kept.
  const std::string invalid = trace_file_error(kDataDir + "/not_json.json");
  EXPECT_NE(invalid.find("not_json.json: not valid JSON: parse error at line 2, column"), std::string::npos) << invalid;
  EXPECT_EQ(invalid.find('\n'), std::string::npos);

  EXPECT_NE(trace_file_error(kDataDir + "/free_unknown_id.json").find("free_unknown_id.json: event 2: free of id 5 which is not allocated"),
            std::string::npos);
}

// A value nested 100,000 deep where a number belongs: the message names its kind. Printing it
// whole (json::dump) overflowed the stack: `trainmem replay` crashed (found by fuzz_trace).
TEST(TraceParse, DeeplyNestedValuesAreNamedNotPrinted) {
  const std::size_t depth = 100000;
  const std::string nested = std::string(depth, '[') + std::string(depth, ']');
  for (const std::string& field : {std::string("\"size\":") + nested, std::string("\"size\":1,\"category\":") + nested}) {
    const auto trace = nlohmann::json::parse("[{\"action\":\"alloc\",\"id\":1," + field + "}]");
    try {
      parse_trace(trace, "deep.json");
      ADD_FAILURE() << "no TraceError";
    } catch (const TraceError& e) {
      EXPECT_NE(std::string(e.what()).find("an array"), std::string::npos) << e.what();
    }
  }
  const auto action = nlohmann::json::parse("[{\"action\":" + nested + "}]");
  EXPECT_THROW(parse_trace(action, "deep.json"), TraceError);
}

// --- Replay

// The rules, by hand (ANCHORS.md):
//   event 0: alloc 1000 B  -> rounded 1024 (512 multiple); <= 1 MiB: small pool, a new 2 MiB segment
//   event 1: alloc 5 MiB   -> large pool, 1 MiB < 5 MiB < 10 MiB: a new 20 MiB segment, split (15 MiB left)
//   events 2, 3: free both -> allocated 0, but the cache keeps both segments: reserved 22 MiB
//   event 4: empty_cache   -> both segments are wholly free and go back: reserved 0
TEST(TraceReplay, SmallTraceMatchesTheRulesByHand) {
  BudgetDeviceMemory device(GiB, /*backed=*/false);
  CachingAllocator allocator(device);
  const ReplayResult r = replay_trace(parse_trace_file(kDataDir + "/small_trace.json"), allocator);
  EXPECT_FALSE(r.oom);
  EXPECT_EQ(r.events_total, 5u);
  EXPECT_EQ(r.events_replayed, 5u);

  const MemoryStats& s = r.stats;
  EXPECT_EQ(peak(s.allocated_bytes), 1024 + mib(5));
  EXPECT_EQ(peak(s.requested_bytes), 1000 + mib(5));
  EXPECT_EQ(peak(s.allocated_bytes, SMALL), 1024);
  EXPECT_EQ(peak(s.allocated_bytes, LARGE), mib(5));
  EXPECT_EQ(peak(s.reserved_bytes), mib(22));
  EXPECT_EQ(peak(s.reserved_bytes, SMALL), mib(2));
  EXPECT_EQ(peak(s.reserved_bytes, LARGE), mib(20));
  EXPECT_EQ(s.by_category[index_of(MemoryCategory::activations)].peak, 1024);
  EXPECT_EQ(s.by_category[index_of(MemoryCategory::parameters)].peak, mib(5));
  EXPECT_EQ(cur(s.allocated_bytes), 0);
  EXPECT_EQ(cur(s.reserved_bytes), 0);
  EXPECT_EQ(s.num_device_alloc, 2);
  EXPECT_EQ(s.num_device_free, 2);
  EXPECT_EQ(s.num_alloc_retries, 0);
  EXPECT_EQ(s.num_ooms, 0);
  EXPECT_TRUE(r.segments.empty());
  EXPECT_TRUE(check_invariants(allocator));
}

TEST(TraceReplay, WithoutEmptyCacheTheSegmentsStayReserved) {
  Replay replay(R"([{"action": "alloc", "id": 1, "size": 1000}, {"action": "alloc", "id": 2, "size": 5242880},
                    {"action": "free", "id": 1}, {"action": "free", "id": 2}])");
  EXPECT_EQ(cur(replay.result.stats.allocated_bytes), 0);
  EXPECT_EQ(cur(replay.result.stats.reserved_bytes), mib(22));
  EXPECT_EQ(replay.result.stats.num_device_free, 0);
  ASSERT_EQ(replay.result.segments.size(), 2u);
  EXPECT_EQ(replay.result.fragmentation.external_free_bytes, static_cast<std::size_t>(mib(22)));
  EXPECT_EQ(replay.result.fragmentation.largest_free_block, static_cast<std::size_t>(mib(20)));
}

TEST(TraceReplay, FragmentationWhileBothBlocksAreLive) {
  Replay replay(R"([{"action": "alloc", "id": 1, "size": 1000}, {"action": "alloc", "id": 2, "size": 5242880}])");
  const FragmentationInfo& f = replay.result.fragmentation;
  EXPECT_EQ(f.internal_free_bytes, 24u);                          // 1024 - 1000
  EXPECT_EQ(f.external_free_bytes, mib(2) - 1024 + mib(15));    // the rest of both segments
  EXPECT_EQ(f.largest_free_block, static_cast<std::size_t>(mib(15)));
  EXPECT_EQ(f.awaiting_free_bytes, 0u);
}

TEST(TraceReplay, RawBackendAsksTheDeviceOncePerAllocation) {
  Replay replay(R"([{"action": "alloc", "id": 1, "size": 1000}, {"action": "alloc", "id": 2, "size": 5242880},
                    {"action": "free", "id": 1}, {"action": "alloc", "id": 3, "size": 1000},
                    {"action": "free", "id": 2}, {"action": "free", "id": 3}])",
                GiB, "backend:raw");
  EXPECT_EQ(replay.result.stats.num_device_alloc, 3);
  EXPECT_EQ(replay.result.stats.num_device_free, 3);
  EXPECT_EQ(peak(replay.result.stats.reserved_bytes), mib(5) + 1024);  // no segment rounding
  EXPECT_EQ(cur(replay.result.stats.reserved_bytes), 0);
}

TEST(TraceReplay, StreamsDoNotShareCachedBlocks) {
  // A block freed on stream 0 is not reused for stream 1: a second segment is needed.
  Replay replay(R"([{"action": "alloc", "id": 1, "size": 1000}, {"action": "free", "id": 1},
                    {"action": "alloc", "id": 2, "size": 1000, "stream": 1}])");
  EXPECT_EQ(replay.result.stats.num_device_alloc, 2);
  EXPECT_EQ(cur(replay.result.stats.reserved_bytes), mib(4));
}

// Budget 30 MiB; a 12 MiB request (>= 10 MiB) gets its own 12 MiB segment. The first two fit
// (24 MiB); the third needs 36 MiB: the device refuses, the empty cache has nothing to give back,
// the retry fails, and the replay stops at event 2 with the state before it.
TEST(TraceReplay, OutOfMemoryStopsTheReplayAndIsReported) {
  Replay replay(R"([{"action": "alloc", "id": 1, "size": 12582912}, {"action": "alloc", "id": 2, "size": 12582912},
                    {"action": "alloc", "id": 3, "size": 12582912}, {"action": "free", "id": 1},
                    {"action": "free", "id": 2}])",
                30 * MiB);
  const ReplayResult& r = replay.result;
  ASSERT_TRUE(r.oom);
  EXPECT_EQ(r.oom_event_index, 2u);
  EXPECT_EQ(r.events_replayed, 2u);
  EXPECT_EQ(r.events_total, 5u);
  EXPECT_EQ(r.oom->requested_bytes, 12 * MiB);
  EXPECT_EQ(r.oom->rounded_bytes, 12 * MiB);
  EXPECT_EQ(r.oom->device_request_bytes, 12 * MiB);
  EXPECT_EQ(r.oom->capacity_bytes, 30 * MiB);
  EXPECT_EQ(cur(r.stats.allocated_bytes), mib(24));  // the frees after the OOM did not run
  EXPECT_EQ(cur(r.stats.reserved_bytes), mib(24));
  EXPECT_EQ(r.stats.num_ooms, 1);
  EXPECT_EQ(r.stats.num_alloc_retries, 1);
  EXPECT_EQ(r.stats.num_device_alloc, 2);
}

TEST(TraceReplay, ZeroByteAllocationsAllocateNothing) {
  Replay replay(R"([{"action": "alloc", "id": 1, "size": 0}, {"action": "free", "id": 1}])");
  EXPECT_FALSE(replay.result.oom);
  EXPECT_EQ(replay.result.events_replayed, 2u);
  EXPECT_EQ(replay.result.stats.num_device_alloc, 0);
}

// --- JSON

TEST(TraceReplayJson, HasTheDocumentedKeys) {
  Replay replay(R"([{"action": "alloc", "id": 1, "size": 1000, "category": "activations"},
                    {"action": "alloc", "id": 2, "size": 5242880}, {"action": "free", "id": 2}])");
  const nlohmann::json j = replay_result_to_json(replay.result, replay.allocator.config(), GiB);

  for (const char* key : {"allocator_config", "device_memory_bytes", "events", "events_replayed", "memory_stats",
                          "summary", "fragmentation", "segments", "oom"})
    EXPECT_TRUE(j.contains(key)) << key;
  EXPECT_EQ(j["allocator_config"], replay.allocator.config().to_string());
  EXPECT_EQ(j["device_memory_bytes"], GiB);
  EXPECT_EQ(j["events"], 3);
  EXPECT_EQ(j["events_replayed"], 3);
  EXPECT_TRUE(j["oom"].is_null());

  const nlohmann::json& summary = j["summary"];
  EXPECT_EQ(summary["peak_allocated_bytes"], 1024 + mib(5));
  EXPECT_EQ(summary["peak_reserved_bytes"], mib(22));
  EXPECT_EQ(summary["final_allocated_bytes"], 1024);
  EXPECT_EQ(summary["final_reserved_bytes"], mib(22));
  EXPECT_EQ(summary["num_device_alloc"], 2);
  EXPECT_EQ(summary["num_device_free"], 0);
  EXPECT_EQ(summary["num_alloc_retries"], 0);
  EXPECT_EQ(summary["num_ooms"], 0);

  // PyTorch's flat names.
  EXPECT_EQ(j["memory_stats"]["allocated_bytes.all.peak"], 1024 + mib(5));
  EXPECT_EQ(j["memory_stats"]["requested_bytes.all.current"], 1000);
  EXPECT_EQ(j["memory_stats"]["reserved_bytes.large_pool.current"], mib(20));

  for (const char* key : {"internal_free_bytes", "external_free_bytes", "awaiting_free_bytes", "largest_free_block"})
    EXPECT_TRUE(j["fragmentation"].contains(key)) << key;

  // The shape of torch.cuda.memory_snapshot(): the small segment holds the live 1000 B block.
  ASSERT_EQ(j["segments"].size(), 2u);
  const nlohmann::json* small = nullptr;
  for (const nlohmann::json& seg : j["segments"]) {
    for (const char* key : {"address", "total_size", "stream", "segment_type", "allocated_size", "active_size",
                            "requested_size", "blocks"})
      EXPECT_TRUE(seg.contains(key)) << key;
    if (seg["segment_type"] == "small") small = &seg;
  }
  ASSERT_NE(small, nullptr);
  EXPECT_EQ((*small)["total_size"], mib(2));
  EXPECT_EQ((*small)["allocated_size"], 1024);
  EXPECT_EQ((*small)["requested_size"], 1000);
  ASSERT_EQ((*small)["blocks"].size(), 2u);
  const nlohmann::json& block = (*small)["blocks"][0];
  for (const char* key : {"address", "size", "requested_size", "state", "category"})
    EXPECT_TRUE(block.contains(key)) << key;
  EXPECT_EQ(block["state"], "active_allocated");
  EXPECT_EQ(block["category"], "activations");
  EXPECT_EQ((*small)["blocks"][1]["state"], "inactive");
}

TEST(TraceReplayJson, OomObjectCarriesTheReport) {
  Replay replay(R"([{"action": "alloc", "id": 1, "size": 12582912}, {"action": "alloc", "id": 2, "size": 12582912},
                    {"action": "alloc", "id": 3, "size": 12582912}])",
                30 * MiB);
  const nlohmann::json j = replay_result_to_json(replay.result, replay.allocator.config(), 30 * MiB);
  ASSERT_TRUE(j["oom"].is_object());
  EXPECT_EQ(j["oom"]["event_index"], 2);
  EXPECT_EQ(j["oom"]["requested_bytes"], 12 * MiB);
  EXPECT_EQ(j["oom"]["rounded_bytes"], 12 * MiB);
  EXPECT_EQ(j["oom"]["device_request_bytes"], 12 * MiB);
  EXPECT_EQ(j["oom"]["capacity_bytes"], 30 * MiB);
  EXPECT_TRUE(j["oom"]["message"].is_string());
  EXPECT_EQ(j["events_replayed"], 2);
  EXPECT_EQ(j["summary"]["num_ooms"], 1);
}

}  // namespace
}  // namespace trainmem::test

// --- The recorder's own format

namespace trainmem::test {
namespace {

// A history that makes every action the recorder writes: allocations on two streams, frees,
// an empty_cache, an expandable segment's map and unmap, and an OOM at the end (the run stops).
// Replayed under the same settings, its file gives the same statistics, segments and OOM.
TEST(TraceReplayRecording, ARecordingReplaysToItsOwnFigures) {
  for (const char* config : {"", "expandable_segments:True", "max_split_size_mb:20", "backend:raw"}) {
    SCOPED_TRACE(config);
    const std::string path = ::testing::TempDir() + "/trainmem_recording.json";
    BudgetDeviceMemory device(64 * MiB, /*backed=*/false);
    CachingAllocator recorded(device, AllocatorConfig::parse(config));
    recorded.recorder().enable();
    {
      TraceFileWriter file(recorded.recorder(), path);
      void* a = recorded.allocate(1000, MemoryCategory::activations, kDefaultStream, "a");
      void* b = recorded.allocate(5 * MiB, MemoryCategory::parameters);
      void* c = recorded.allocate(300000, MemoryCategory::data, /*stream=*/1);
      recorded.free(a);
      recorded.empty_cache();
      void* d = recorded.allocate(12 * MiB, MemoryCategory::gradients);
      recorded.free(c);
      recorded.free(d);
      EXPECT_THROW(recorded.allocate(60 * MiB, MemoryCategory::workspace), OutOfMemoryError);
      file.finish();
      recorded.free(b);  // after the file: not in it
    }
    std::vector<bool> seen(kTraceActions.size());
    for (const TraceEvent& e : recorded.recorder().events()) seen[static_cast<std::size_t>(e.action)] = true;
    const bool expandable = std::string(config) == "expandable_segments:True";
    for (const TraceActionName& a : kTraceActions) {
      const bool segment_event = a.action == TraceAction::segment_alloc || a.action == TraceAction::segment_free;
      const bool page_event = a.action == TraceAction::segment_map || a.action == TraceAction::segment_unmap;
      if (expandable ? segment_event : page_event) continue;
      EXPECT_TRUE(seen[static_cast<std::size_t>(a.action)]) << "the history makes " << a.name;
    }

    BudgetDeviceMemory replay_device(64 * MiB, /*backed=*/false);
    CachingAllocator replay(replay_device, AllocatorConfig::parse(config));
    const ReplayResult r = replay_trace(parse_trace_file(path), replay);
    ASSERT_TRUE(r.oom);
    EXPECT_EQ(r.oom->rounded_bytes, 60 * MiB);
    EXPECT_EQ(r.oom->category, MemoryCategory::workspace);
    std::size_t oom_event = 0;
    while (recorded.recorder().events()[oom_event].action != TraceAction::oom) ++oom_event;
    EXPECT_EQ(r.oom_event_index, oom_event) << "the index of the oom event in the file";
    // b's free came after the file; peaks and counts are those of the recorded run.
    const MemoryStats before_b = recorded.stats();
    EXPECT_EQ(r.stats.allocated_bytes[0].peak, before_b.allocated_bytes[0].peak);
    EXPECT_EQ(r.stats.reserved_bytes[0].peak, before_b.reserved_bytes[0].peak);
    EXPECT_EQ(r.stats.requested_bytes[0].peak, before_b.requested_bytes[0].peak);
    EXPECT_EQ(r.stats.num_device_alloc, before_b.num_device_alloc);
    EXPECT_EQ(r.stats.num_ooms, before_b.num_ooms);
    EXPECT_EQ(r.stats.num_alloc_retries, before_b.num_alloc_retries);
    EXPECT_EQ(r.stats.allocated_bytes[0].current, before_b.allocated_bytes[0].current + 5 * static_cast<std::int64_t>(MiB))
        << "b is still live in the replay";
    std::remove(path.c_str());
  }
}

TEST(TraceReplayRecording, BadRecordedEventsAreNamed) {
  struct Case {
    const char* trace;
    const char* expected;
  };
  const Case cases[] = {
      {R"({"events": [{"action": "free_requested", "size": 8}]})", "event 0: missing \"addr\""},
      {R"({"events": [{"action": "alloc", "size": 8}]})", "event 0: missing \"id\""},
      {R"({"events": [{"action": "alloc", "addr": 1, "size": 8}, {"action": "free_requested", "addr": 2}]})",
       "event 1: free of id 2 which is not allocated"},
      {R"({"events": [{"action": "segment_alloc", "addr": 1, "size": 8}, {"action": "snapshot"}]})",
       "event 1: unknown action \"snapshot\" (alloc, free or empty_cache; or one the recorder writes: alloc free_requested"},
      {R"({"events": [{"action": "oom", "size": -1}]})", "event 0: \"size\" must be a non-negative integer"},
  };
  for (const Case& c : cases) {
    const std::string message = trace_error(c.trace);
    EXPECT_NE(message.find(c.expected), std::string::npos) << c.trace << "\n  gave: '" << message << "'";
  }
}

// The file reader reads an event at a time (the events are dropped from the document as they are
// read), and gives what the in-memory reader gives, for both top-level forms.
TEST(TraceReplayRecording, TheFileReaderAgreesWithTheDocumentReader) {
  const std::string events = R"([{"action": "alloc", "addr": 10, "size": 1000, "stream": 2, "phase": "x", "name": "t"},
      {"action": "segment_alloc", "addr": 10, "size": 2097152}, {"action": "free_requested", "addr": 10},
      {"action": "free_completed", "addr": 10}, {"action": "empty_cache"}, {"action": "oom", "size": 512}])";
  for (const std::string& text : {events, "{\"phases\": [\"x\"], \"events\": " + events + ", \"more\": [1]}"}) {
    std::istringstream in(text);
    const std::vector<TraceOp> streamed = parse_trace_stream(in, "t.json");
    const std::vector<TraceOp> whole = parse_trace(nlohmann::json::parse(text), "t.json");
    ASSERT_EQ(streamed.size(), 4u) << text;
    ASSERT_EQ(whole.size(), 4u);
    for (std::size_t i = 0; i < streamed.size(); ++i) {
      EXPECT_EQ(streamed[i].action, whole[i].action);
      EXPECT_EQ(streamed[i].id, whole[i].id);
      EXPECT_EQ(streamed[i].size, whole[i].size);
      EXPECT_EQ(streamed[i].event, whole[i].event);
    }
    EXPECT_EQ(streamed[0].stream, StreamId{2});
    EXPECT_EQ(streamed[2].action, TraceOp::Action::empty_cache);
    EXPECT_EQ(streamed[3].event, 5u);
    EXPECT_LT(streamed[3].id, 0) << "an oom's request gets an id nothing frees";
  }
  std::istringstream list_of_numbers("[{\"action\": \"empty_cache\"}, 3]");
  EXPECT_THROW(parse_trace_stream(list_of_numbers, "t.json"), TraceError);
  std::istringstream nested("{\"events\": [[1]]}");
  try {
    parse_trace_stream(nested, "t.json");
    ADD_FAILURE() << "no TraceError";
  } catch (const TraceError& e) {
    EXPECT_NE(std::string(e.what()).find("event 0: expected an object, found array"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace trainmem::test
