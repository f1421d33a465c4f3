// Recording a run from the outside (issue 25): --record-memory streams the allocator's events to
// its file and `trainmem replay` reads that file back to the run's own figures; recording and
// the loss scale never end a run with a crash or a silently wrong result; a run too large for the
// process's memory limit is refused naming the limit.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

#include "common/tests/command_runner.h"
#include "suites/trainmem/tests/trainmem_program.h"

namespace trainmem {
namespace {

using cli_test::CliRun;
using cli_test::trainmem;
using testing_support::read_text_file;


// A recorded tiny run replays to its own figures: every statistic of the run's --json (the
// allocator's statistics at the end of the last step) equals the replay's, under the run's own
// allocator settings. Before, replay refused the recorder's file ("unknown action segment_alloc").
TEST(CliRecording, ARecordedRunReplaysToItsOwnFigures) {
  const std::string record = testing_support::scratch_path("recording.json");
  const std::string json = testing_support::scratch_path("recording_run.json");
  struct Case {
    std::string technique_flags;  // train only
    std::string allocator_flags;  // train and replay: the same allocator and budget
  };
  const Case cases[] = {{"", ""},
                        {"--precision bf16 --recompute selective", ""},
                        {"--empty-cache every-step", "--allocator-config expandable_segments:True"},
                        {"", "--allocator-config backend:raw --device-memory 64MiB"}};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.technique_flags + " " + c.allocator_flags);
    const CliRun run = trainmem("train --device cpu --model tiny --steps 3 " + c.technique_flags + " " + c.allocator_flags +
                                " --record-memory " + record + " --json " + json);
    ASSERT_EQ(run.exit_code, 0) << run.err;
    const nlohmann::json measured = nlohmann::json::parse(read_text_file(json))["memory"];
    const CliRun replay = trainmem("replay " + record + " --json " + c.allocator_flags);
    ASSERT_EQ(replay.exit_code, 0) << replay.err;
    const nlohmann::json replayed = nlohmann::json::parse(replay.out);
    EXPECT_EQ(replayed["summary"]["peak_allocated_bytes"], measured["peak_allocated_bytes"]);
    EXPECT_EQ(replayed["summary"]["peak_reserved_bytes"], measured["peak_reserved_bytes"]);
    EXPECT_EQ(replayed["memory_stats"], measured["stats"]) << "every statistic";
  }
  std::remove(record.c_str());
  std::remove(json.c_str());
}

// The event log cannot be written while the run goes (a full disk): the run stops after that step
// with one line saying so (exit 1), not inside the allocator (std::terminate, exit 134). 60 steps
// of tiny write more than the writer's 1 MiB buffer, so the write fails during the run.
TEST(CliRecording, ALogThatCannotBeWrittenStopsTheRunWithOneLine) {
  const CliRun r = trainmem("train --device cpu --model tiny --steps 60 --record-memory /dev/full");
  EXPECT_EQ(r.exit_code, 1) << r.err;
  const std::string last_line = r.err.substr(r.err.rfind('\n', r.err.size() - 2) + 1);
  EXPECT_EQ(last_line.rfind("trainmem: error: the memory recorder stopped at event ", 0), 0u) << r.err;
  EXPECT_NE(last_line.find("cannot write --record-memory /dev/full: No space left on device"), std::string::npos) << r.err;
  EXPECT_EQ(r.out.find("step   60/60"), std::string::npos) << "the run stopped early";
}

// The review's run: 2^64 backed off by 1e-300 reached 1.8e-281, a "clean" step wrote NaN into
// the weights, every later step was skipped, and the run exited 0. The back-off factor has a
// stated range now, and within the ranges the scale is clamped and the weights stay finite.
TEST(CliRecording, TheLossScaleStaysInItsRange) {
  const std::string base = "train --device cpu --model tiny --steps 4 --precision fp16 --loss-scale 1.8e19 ";
  const CliRun refused = trainmem(base + "--loss-scale-backoff 1e-300");
  EXPECT_EQ(refused.exit_code, 2) << refused.err;
  EXPECT_NE(refused.err.find("--loss-scale-backoff: must be at least"), std::string::npos) << refused.err;

  const std::string json = testing_support::scratch_path("loss_scale_run.json");
  const CliRun run = trainmem(base + "--loss-scale-backoff 0.0000152587890625 --json " + json);  // 2^-16
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const nlohmann::json steps = nlohmann::json::parse(read_text_file(json))["steps"];
  ASSERT_EQ(steps.size(), 4u);
  for (const nlohmann::json& s : steps) {
    EXPECT_GE(s["loss_scale"].get<double>(), 0x1p-24) << s;
    EXPECT_LE(s["loss_scale"].get<double>(), 0x1p64) << s;
    EXPECT_TRUE(s["loss"].is_number_float()) << s;  // NaN is written as null
  }
  EXPECT_FALSE(steps.back()["skipped"].get<bool>()) << "a scale in range trains again";
  std::remove(json.c_str());
}

#if defined(__SANITIZE_ADDRESS__)
#define TRAINMEM_UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TRAINMEM_UNDER_ASAN 1
#endif
#endif

// Under `ulimit -d` or `ulimit -v` the host memory the run may take is the room under the limit,
// not MemAvailable: a run whose budget the host would refuse is stopped before it starts, naming
// the limit, instead of failing halfway with a device out-of-memory report and its advice.
// Peak reserved 1.41 GiB; the limits are 1 GB. Before: a device OOM report halfway, advising
// techniques.
[[maybe_unused]] constexpr const char* kLargerThanOneGigabyte = "train --device cpu --model small --batch 256 --steps 1";

TEST(CliRecording, ARunLargerThanTheProcesssDataLimitIsRefusedNamingIt) {
#ifdef TRAINMEM_UNDER_ASAN
  GTEST_SKIP() << "AddressSanitizer's shadow memory counts against ulimit -d: no run starts under it";
#else
  const CliRun r = trainmem(kLargerThanOneGigabyte, "ulimit -d 1000000;");
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("the process's data limit, ulimit -d"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("out of memory on"), std::string::npos) << "not a device OOM: " << r.err;
#endif
}

TEST(CliRecording, ARunLargerThanTheProcesssAddressSpaceLimitIsRefusedNamingIt) {
#ifdef TRAINMEM_UNDER_ASAN
  GTEST_SKIP() << "AddressSanitizer reserves terabytes of address space: no run starts under ulimit -v";
#else
  // ulimit -v counts every mapping, the shared libraries' too: a build that links CUDA's libraries
  // (cuDNN, cuBLAS, NVRTC: gigabytes of address space) cannot even load under 1 GB.
  if (trainmem("info --device cpu", "ulimit -v 1000000;").exit_code != 0)
    GTEST_SKIP() << "this build's trainmem cannot load under ulimit -v 1000000 (its libraries' address space); "
                    "ARunLargerThanTheProcesssDataLimitIsRefusedNamingIt tests the same check under ulimit -d";
  const CliRun r = trainmem(kLargerThanOneGigabyte, "ulimit -v 1000000;");
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("the process's address-space limit, ulimit -v"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("out of memory on"), std::string::npos) << "not a device OOM: " << r.err;
#endif
}

}  // namespace
}  // namespace trainmem
