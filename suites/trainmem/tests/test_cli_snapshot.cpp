// `trainmem replay` of a PyTorch memory snapshot, from the outside: the real snapshot of
// common/tests/data/snapshots replayed as recorded (its own peaks and decisions), the same
// structure as JSON giving the same answer, --what-if's rows each equal to a direct replay under
// its setting, an out-of-memory row naming the event and the frames, and hostile or broken files
// refused in one line.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "common/util/restricted_pickle.h"
#include "suites/trainmem/tests/trainmem_program.h"

namespace trainmem::cli_test {
namespace {

const std::string kSnapshot = std::string(TRAINMEM_TEST_DATA_DIR) + "/snapshots/small-cnn-training.pickle";

nlohmann::json json_of(const CliRun& r) {
  try {
    return nlohmann::json::parse(r.out);
  } catch (const nlohmann::json::parse_error& e) {
    ADD_FAILURE() << "stdout is not JSON: " << e.what() << "\n" << r.out << r.err;
    return nlohmann::json::object();
  }
}

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out << bytes;
}

TEST(CliSnapshot, TheRealSnapshotReplaysAsRecorded) {
  const CliRun text = trainmem("replay " + kSnapshot);
  ASSERT_EQ(text.exit_code, 0) << text.err;
  for (const char* line : {"5803 events", "before recording: 3 segments (24.00 MiB), 31 live blocks",
                           "peak reserved     128.00 MiB (134217728 B)  = recorded",
                           "peak requested    103.24 MiB (108258676 B)  = recorded", "cudaMalloc calls  7 (recorded: 7)",
                           "the real allocator's: 7 of 7 segment events, every block at its recorded address",
                           "segments at end   the snapshot's, block for block"})
    EXPECT_NE(text.out.find(line), std::string::npos) << line << "\n" << text.out;

  const CliRun json = trainmem("replay " + kSnapshot + " --json");
  ASSERT_EQ(json.exit_code, 0) << json.err;
  const nlohmann::json j = json_of(json);
  EXPECT_EQ(j["replayed_as_recorded"], true);
  EXPECT_EQ(j["comparison"]["divergence"], nullptr);
  EXPECT_EQ(j["comparison"]["segment_events_matched"], 7);
  EXPECT_EQ(j["summary"]["peak_reserved_bytes"], 134217728);
  EXPECT_EQ(j["memory_stats"]["requested_bytes.all.peak"], 108258676);
  EXPECT_EQ(j["snapshot"]["recorded"]["peak_reserved_bytes"], 134217728);
  EXPECT_EQ(j["snapshot"]["before_trace"]["blocks"], 31);
  EXPECT_EQ(j["segments_as_snapshot"], true);
}

// The snapshot's structure as JSON (what json.dump(snapshot) writes) replays as the pickle does.
TEST(CliSnapshot, TheSameSnapshotAsJsonGivesTheSameReplay) {
  const std::string path = temp_path("snapshot.json");
  write_file(path, read_restricted_pickle_file(kSnapshot).dump());
  nlohmann::json from_pickle = json_of(trainmem("replay " + kSnapshot + " --json"));
  nlohmann::json from_json = json_of(trainmem("replay " + path + " --json"));
  from_pickle["snapshot"].erase("source");
  from_json["snapshot"].erase("source");
  EXPECT_EQ(from_json, from_pickle);
  std::filesystem::remove(path);
}

TEST(CliSnapshot, EveryWhatIfRowIsADirectReplayUnderItsSetting) {
  const CliRun r = trainmem("replay " + kSnapshot + " --what-if --json --device-memory 1GiB");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = json_of(r);
  ASSERT_GE(j["what_if"].size(), 4u);
  EXPECT_EQ(j["what_if"][0]["allocator_config"], "backend:caching,expandable_segments:False");  // the recorded settings first
  bool expandable_row = false;
  for (const nlohmann::json& row : j["what_if"]) {
    const std::string config = row["allocator_config"];
    expandable_row |= config.find("expandable_segments:True") != std::string::npos;
    const nlohmann::json direct =
        json_of(trainmem("replay " + kSnapshot + " --json --device-memory 1GiB --allocator-config " + config));
    EXPECT_EQ(row["peak_reserved_bytes"], direct["summary"]["peak_reserved_bytes"]) << config;
    EXPECT_EQ(row["peak_allocated_bytes"], direct["summary"]["peak_allocated_bytes"]) << config;
    EXPECT_EQ(row["num_device_alloc"], direct["summary"]["num_device_alloc"]) << config;
    EXPECT_EQ(row["unallocated_at_peak_reserved_bytes"], direct["unallocated_at_peak_reserved_bytes"]) << config;
    EXPECT_EQ(row["oom"], nullptr) << config;
  }
  EXPECT_TRUE(expandable_row);
  // The lowest peak reserved is a row's, and the card named holds it.
  std::int64_t lowest = j["what_if"][0]["peak_reserved_bytes"];
  for (const nlohmann::json& row : j["what_if"]) lowest = std::min<std::int64_t>(lowest, row["peak_reserved_bytes"]);
  EXPECT_EQ(j["lowest_peak_reserved"]["peak_reserved_bytes"], lowest);
  const std::string gpu = j["lowest_peak_reserved"]["smallest_gpu"];
  const std::string config = j["lowest_peak_reserved"]["allocator_config"];
  EXPECT_EQ(trainmem("replay " + kSnapshot + " --json --gpu " + gpu + " --allocator-config " + config).exit_code, 0);
}

// On a card too small the replay stops where it runs out, and says which request it was and
// where the program made it (the snapshot's frames).
TEST(CliSnapshot, RunningOutOfMemoryNamesTheEventAndItsFrames) {
  const CliRun r = trainmem("replay " + kSnapshot + " --device-memory 64MiB --json");
  EXPECT_EQ(r.exit_code, 1) << r.err;
  const nlohmann::json j = json_of(r);
  ASSERT_TRUE(j["oom"].is_object()) << r.out;
  EXPECT_GT(j["oom"]["event_index"], 0);
  ASSERT_FALSE(j["oom"]["frames"].empty());
  EXPECT_NE(j["oom"]["frames"][0].get<std::string>().find(".py:"), std::string::npos) << j["oom"]["frames"];
  EXPECT_NE(r.err.find("ran out of memory"), std::string::npos);

  const CliRun table = trainmem("replay " + kSnapshot + " --device-memory 64MiB --what-if");
  EXPECT_EQ(table.exit_code, 1);
  EXPECT_NE(table.out.find("out of memory at event " + std::to_string(j["oom"]["event_index"].get<int>())),
            std::string::npos)
      << table.out;
  EXPECT_NE(table.out.find("Lowest peak reserved over the whole trace: "), std::string::npos) << table.out;
}

// Where the memory went: the real snapshot's phases come from its stack frames; replayed as
// recorded, each phase's peak reserved is the recorded one and both peaks fall in the same phase;
// the timelines are bounded and reach the peaks; an out-of-memory event is placed in its phase.
TEST(CliSnapshot, ThePeaksArePlacedInTheirPhase) {
  const CliRun r = trainmem("replay " + kSnapshot + " --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = json_of(r);
  EXPECT_EQ(j["phases"]["sources"], nlohmann::json(std::vector<std::string>{"stack frames"}));
  std::vector<std::string> names;
  for (const nlohmann::json& row : j["phases"]["table"]) {
    names.push_back(row["phase"]);
    EXPECT_EQ(row["replayed_peak_reserved_bytes"], row["recorded_peak_reserved_bytes"]) << row;
  }
  EXPECT_EQ(names, (std::vector<std::string>{"unknown", "forward", "backward", "optimizer", "zero_grad"}));
  const nlohmann::json& peaks = j["peaks"];
  EXPECT_EQ(peaks["recorded_reserved"]["bytes"], 134217728);
  EXPECT_EQ(peaks["replayed_reserved"]["bytes"], 134217728);
  EXPECT_EQ(peaks["replayed_reserved"]["phase"], peaks["recorded_reserved"]["phase"]);
  EXPECT_EQ(peaks["replayed_reserved"]["step"], peaks["recorded_reserved"]["step"]);
  EXPECT_EQ(peaks["recorded_requested"]["bytes"], 108258676);
  EXPECT_EQ(peaks["replayed_allocated"]["bytes"], j["summary"]["peak_allocated_bytes"]);
  for (const char* which : {"recorded", "replayed"}) {
    const nlohmann::json& t = j["timeline"][which];
    EXPECT_LE(t["event"].size(), j["timeline"]["points"].get<std::size_t>()) << which;
    EXPECT_EQ(*std::max_element(t["reserved_bytes"].begin(), t["reserved_bytes"].end()), 134217728) << which;
  }
  EXPECT_FALSE(j["timeline"].contains("lowest_peak_setting"));  // only with --what-if

  const CliRun text = trainmem("replay " + kSnapshot);
  EXPECT_NE(text.out.find("Where the memory went (phases from stack frames"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("recorded peak reserved at event " + std::to_string(peaks["recorded_reserved"]["event"].get<int>()) +
                          " (" + peaks["recorded_reserved"]["phase"].get<std::string>()),
            std::string::npos)
      << text.out;

  const nlohmann::json small = json_of(trainmem("replay " + kSnapshot + " --device-memory 112MiB --json"));
  ASSERT_TRUE(small["oom"].is_object());
  EXPECT_EQ(small["oom"]["phase"], "backward");  // a backward's request (its frames: PowBackward0)
  EXPECT_TRUE(small["oom"]["step"].is_number());
}

// trainmem's own --memory-snapshot files (PyTorch's structure, with allocator_settings) replay as
// recorded to the run's own figures: every statistic of the run's --json, its settings read back
// from the snapshot, every decision the run's.
TEST(CliSnapshot, TrainmemsOwnSnapshotsReplayToTheRunsFigures) {
  const std::string snapshot = temp_path("own_snapshot.json");
  const std::string json = temp_path("own_snapshot_run.json");
  for (const std::string flags : {"", "--precision bf16 --recompute selective", "--allocator-config max_split_size_mb:20",
                                  "--empty-cache every-step --allocator-config expandable_segments:True",
                                  "--allocator-config roundup_power2_divisions:4",
                                  "--allocator-config backend:raw --device-memory 64MiB"}) {
    SCOPED_TRACE(flags);
    const CliRun run =
        trainmem("train --device cpu --model tiny --steps 3 " + flags + " --memory-snapshot " + snapshot + " --json " + json);
    ASSERT_EQ(run.exit_code, 0) << run.err;
    std::ifstream in(json);
    const nlohmann::json measured = nlohmann::json::parse(in)["memory"];
    const CliRun replay = trainmem("replay " + snapshot + " --json");
    ASSERT_EQ(replay.exit_code, 0) << replay.err;
    nlohmann::json replayed = json_of(replay);
    EXPECT_EQ(replayed["allocator_config"], measured["stats"].is_object() ? replayed["allocator_config"] : nullptr);
    EXPECT_EQ(replayed["comparison"]["divergence"], nullptr) << replayed["comparison"];
    EXPECT_EQ(replayed["segments_as_snapshot"], true);
    EXPECT_EQ(replayed["summary"]["peak_allocated_bytes"], measured["peak_allocated_bytes"]);
    EXPECT_EQ(replayed["summary"]["peak_reserved_bytes"], measured["peak_reserved_bytes"]);
    // Every statistic but the syncs: an empty_cache() that released nothing leaves no event.
    nlohmann::json stats = measured["stats"];
    stats.erase("num_sync_all_streams");
    replayed["memory_stats"].erase("num_sync_all_streams");
    EXPECT_EQ(replayed["memory_stats"], stats);
    // The run's own phases, and its peak placed in one of them.
    EXPECT_EQ(replayed["phases"]["sources"], nlohmann::json(std::vector<std::string>{"trainmem's phases"}));
    std::set<std::string> phases;
    for (const nlohmann::json& row : replayed["phases"]["table"]) phases.insert(row["phase"].get<std::string>());
    for (const char* phase : {"forward", "backward", "optimizer"}) EXPECT_TRUE(phases.count(phase)) << phase;
    EXPECT_EQ(replayed["peaks"]["replayed_allocated"]["bytes"], measured["peak_allocated_bytes"]);
    EXPECT_TRUE(phases.count(replayed["peaks"]["replayed_allocated"]["phase"].get<std::string>()));
  }
  std::filesystem::remove(snapshot);
  std::filesystem::remove(json);
}

// A pickle that would run a command when Python loads it: refused in one line, and nothing ran.
TEST(CliSnapshot, AHostileOrBrokenFileIsRefusedInOneLine) {
  const std::filesystem::path marker = std::filesystem::temp_directory_path() / "trainmem_cli_pickle_ran_code";
  std::filesystem::remove(marker);
  const std::string hostile = temp_path("hostile.pickle");
  write_file(hostile, "cos\nsystem\n(S'touch " + marker.string() + "'\ntR.");
  CliRun r = trainmem("replay " + hostile);
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.err.find("byte 0 (GLOBAL): refused: it would import or call code"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(marker)) << "the pickle's command ran";

  // Truncated: the real snapshot's first half.
  std::ifstream in(kSnapshot, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string truncated = temp_path("truncated.pickle");
  write_file(truncated, bytes.substr(0, bytes.size() / 2));
  r = trainmem("replay " + truncated);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_NE(r.err.find("truncated.pickle: byte"), std::string::npos) << r.err;

  // A snapshot of two devices with events needs --device; --device on a trace is refused.
  const std::string two = temp_path("two_devices.json");
  nlohmann::json ev = nlohmann::json::object();
  ev["action"] = "alloc";
  ev["addr"] = 1 << 30;
  ev["size"] = 512;
  nlohmann::json doc = nlohmann::json::object();
  doc["segments"] = nlohmann::json::array();
  doc["device_traces"] = nlohmann::json::array();
  for (int device = 0; device < 2; ++device) doc["device_traces"].push_back(nlohmann::json::array({ev}));
  write_file(two, doc.dump());
  r = trainmem("replay " + two);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("pick one with --device N"), std::string::npos) << r.err;
  EXPECT_EQ(json_of(trainmem("replay " + two + " --device 1 --json"))["snapshot"]["device"], 1);
  r = trainmem("replay " + std::string(TRAINMEM_CLI_TEST_DATA_DIR) + "/small_trace.json --what-if");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--what-if needs a PyTorch memory snapshot"), std::string::npos) << r.err;
  r = trainmem("replay " + kSnapshot + " --gpu a100-40gb --device-memory 1GiB");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("give --gpu or --device-memory, not both"), std::string::npos) << r.err;
  for (const std::string& p : {hostile, truncated, two}) std::filesystem::remove(p);
}

}  // namespace
}  // namespace trainmem::cli_test
