// The meta device runs the real training loop with no memory and no kernels, so its allocation
// sequence must be the CPU backend's, event for event: the same requests, sizes, categories,
// phases and steps in the same order, and therefore the same statistics, peaks and segments.
// Only addresses differ (meta's are made up). This is what lets the estimator be a meta run.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/tests/command_runner.h"

namespace trainmem {
namespace {

using CliRun = testing_support::CommandResult;

CliRun trainmem(const std::string& args) { return testing_support::run_program("", TRAINMEM_BINARY, args); }

struct TrainedRun {
  nlohmann::json memory;  // --json's "memory": statistics, peaks, categories, fragmentation
  nlohmann::json events;  // --record-memory's events, without their addresses
};

TrainedRun train_on(const std::string& device, const std::string& flags) {
  const std::string json = testing_support::scratch_path("meta_" + device + ".json");
  const std::string record = testing_support::scratch_path("meta_" + device + "_events.json");
  const CliRun r = trainmem("train --device " + device + " --steps 3 " + flags + " --json " + json + " --record-memory " + record);
  EXPECT_EQ(r.exit_code, 0) << device << " " << flags << ": " << r.err;
  TrainedRun run;
  run.memory = nlohmann::json::parse(testing_support::read_text_file(json), nullptr, false)["memory"];
  nlohmann::json events = nlohmann::json::parse(testing_support::read_text_file(record), nullptr, false)["events"];
  for (nlohmann::json& e : events) e.erase("addr");
  run.events = std::move(events);
  std::remove(json.c_str());
  std::remove(record.c_str());
  return run;
}

TEST(MetaDevice, MakesTheCpuBackendsAllocationSequenceEventForEvent) {
  const std::vector<std::string> configurations = {
      "",
      "--model small --batch 2",
      "--precision bf16",
      "--precision fp16 --recompute selective --accum 3",
      "--attention flash --precision bf16",
      "--attention flash --recompute full",
      "--recompute sqrt --layers 5",
      "--recompute every:2 --layers 4 --precision fp16",
      "--loader lazy --prefetch 3",
      "--loader eager --precision bf16",
      "--allocator-config expandable_segments:True --empty-cache every-step",
      "--allocator-config max_split_size_mb:20 --device-memory 64MiB --model small",
      "--allocator-config backend:raw",
      "--zero 1",
      "--zero 3 --precision bf16",
      "--zero 2 --offload optimizer",
      "--fsdp full --fsdp-prefetch on",
      "--fsdp grad_op --precision fp16",
  };
  for (const std::string& flags : configurations) {
    SCOPED_TRACE(flags);
    const TrainedRun cpu = train_on("cpu", flags), meta = train_on("meta", flags);
    ASSERT_FALSE(cpu.events.empty());
    EXPECT_EQ(cpu.events.size(), meta.events.size());
    EXPECT_TRUE(cpu.events == meta.events) << "the allocation sequences differ";
    EXPECT_EQ(cpu.memory, meta.memory);
  }
}

// Nothing is computed, so any size runs at once: gpt2-1.5b for two steps (its host-side
// initialization alone, 6 GB of random values, is skipped too).
TEST(MetaDevice, RunsAModelNoCpuCouldTrainHere) {
  const CliRun r = trainmem("train --device meta --model gpt2-1.5b --batch 4 --steps 2 --device-memory 80GB");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("device: meta"), std::string::npos) << r.err;
  EXPECT_NE(r.out.find("step    2/2"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("loss 0.0000"), std::string::npos) << "host reads of device values are zeros: " << r.out;
}

}  // namespace
}  // namespace trainmem
