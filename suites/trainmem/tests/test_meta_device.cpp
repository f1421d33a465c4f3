// The meta device runs the real training loop with no memory and no kernels, so its allocation
// sequence must be the CPU backend's, event for event: the same requests, sizes, categories,
// phases and steps in the same order, and therefore the same statistics, peaks and segments.
// Only addresses differ (meta's are made up). This is what lets the estimator be a meta run.
#include <gtest/gtest.h>

#include <cstdio>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/tests/command_runner.h"
#include "suites/trainmem/tests/sample_setups.h"
#include "suites/trainmem/tests/trainmem_program.h"

namespace trainmem {
namespace {

using cli_test::CliRun;
using cli_test::trainmem;


struct TrainedRun {
  nlohmann::json memory;  // --json's "memory": statistics, peaks, categories, fragmentation
  nlohmann::json events;  // --record-memory's events, without their addresses
};

TrainedRun train_on(const std::string& device, const std::string& flags) {
  const std::string json = testing_support::scratch_path("meta_run.json");
  const std::string record = testing_support::scratch_path("meta_run_events.json");
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

// Every sample setup: the core's and each registered technique's (sample_setups.h).
TEST(MetaDevice, MakesTheCpuBackendsAllocationSequenceEventForEvent) {
  for (const testing_support::Sample& sample : testing_support::every_sample()) {
    SCOPED_TRACE(sample.technique + ": " + sample.flags);
    std::printf("%-16s %s\n", sample.technique.c_str(), sample.flags.c_str());
    const TrainedRun cpu = train_on("cpu", sample.flags), meta = train_on("meta", sample.flags);
    ASSERT_FALSE(cpu.events.empty());
    EXPECT_EQ(cpu.events.size(), meta.events.size());
    EXPECT_TRUE(cpu.events == meta.events) << "the allocation sequences differ";
    EXPECT_EQ(cpu.memory, meta.memory);
  }
}

// The name of an alloc/free event's tensor ("" for segment events and unnamed blocks).
std::string tensor_name(const nlohmann::json& event) { return event.value("name", std::string()); }

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The alloc and free events of a run, without the tensors `skip` names, and without the fields
// that depend on where blocks landed (segments, block sizes after splitting).
nlohmann::json tensor_events(const nlohmann::json& events, const std::function<bool(const std::string&)>& skip) {
  nlohmann::json kept = nlohmann::json::array();
  for (const nlohmann::json& e : events) {
    const std::string action = e["action"];
    if (action != "alloc" && action != "free_requested") continue;
    if (skip(tensor_name(e))) continue;
    kept.push_back({{"action", action}, {"name", tensor_name(e)}, {"size", e["size"]}, {"category", e["category"]},
                    {"phase", e["phase"]}, {"step", e["step"]}});
  }
  return kept;
}

// --device meta --pattern cuda follows the CUDA backend's pattern. It differs from the CPU
// backend's by exactly the declared rules, and nothing else:
//   - flash attention's CUDA backward takes its workspace ("attn.flash.workspace",
//     kernels/flash_attention_workspace.h);
//   - the CUDA layernorm and embedding backwards take theirs ("ln1.backward.workspace", ...,
//     "embedding.backward.workspace"; kernels/layernorm.h, kernels/embedding.h);
//   - the CUDA gradient norm sums into one device float ("grad_norm.accumulator").
// With those left out, the two sequences are the same, request for request. And in no precision
// does either make an fp32 copy of a 16-bit tensor (the kernels take the storage type).
// Configurations: flash attention in both 16-bit formats with the techniques that change its
// tensors' lives, then every sample setup the CUDA backend's rules take (not flash attention in
// fp32, which runs on a GPU in 16 bits only).
TEST(MetaDevice, CudaPatternDiffersFromTheCpusByTheDeclaredRulesOnly) {
  std::vector<std::string> configurations = {
      "--precision fp16 --attention flash --recompute selective --accum 2",
      "--precision bf16 --recompute full --zero 3",
      "--precision bf16 --attention flash --fsdp full --fsdp-prefetch on",
  };
  for (const testing_support::Sample& sample : testing_support::every_sample()) {
    try {
      testing_support::setup_from_flags(sample.flags, DeviceKind::cuda);
      configurations.push_back(sample.flags);
    } catch (const std::invalid_argument& e) {
      std::printf("not on the CUDA pattern: %s (%s)\n", sample.flags.c_str(), e.what());
    }
  }
  auto rule = [](const std::string& name) {
    return ends_with(name, "attn.flash.workspace") || ends_with(name, ".backward.workspace") ||
           name == "grad_norm.accumulator";
  };
  auto count = [](const nlohmann::json& events, const std::string& suffix) {
    long n = 0;
    for (const nlohmann::json& e : events)
      if (e["action"] == "alloc" && ends_with(tensor_name(e), suffix)) ++n;
    return n;
  };
  auto count_named = [](const nlohmann::json& events, const std::string& name) {
    long n = 0;
    for (const nlohmann::json& e : events)
      if (e["action"] == "alloc" && tensor_name(e) == name) ++n;
    return n;
  };
  for (const std::string& flags : configurations) {
    SCOPED_TRACE(flags);
    const TrainedRun cpu = train_on("meta --pattern cpu", flags), cuda = train_on("meta --pattern cuda", flags);
    const nlohmann::json a = tensor_events(cpu.events, rule), b = tensor_events(cuda.events, rule);
    ASSERT_FALSE(a.empty());
    EXPECT_EQ(a.size(), b.size());
    EXPECT_TRUE(a == b) << "the CUDA pattern differs from the CPU's beyond the declared rules";
    // The rules do apply: the workspaces appear where they should.
    const bool flash = flags.find("flash") != std::string::npos;
    EXPECT_EQ(count(cuda.events, "attn.flash.workspace") > 0, flash);
    EXPECT_EQ(count(cpu.events, "attn.flash.workspace"), 0);
    // The norms' backward workspaces: GPT's layernorms ln1, ln2, lnf; Llama's RMSNorms.
    const bool llama = testing_support::setup_from_flags(flags).model.arch == Arch::llama;
    EXPECT_GT(count(cuda.events, llama ? "attn_norm.backward.workspace" : "ln1.backward.workspace"), 0);
    EXPECT_GT(count(cuda.events, llama ? "mlp_norm.backward.workspace" : "ln2.backward.workspace"), 0);
    EXPECT_EQ(count_named(cuda.events, llama ? "norm.backward.workspace" : "lnf.backward.workspace"),
              count(cuda.events, "embedding.backward.workspace"));
    EXPECT_GT(count(cuda.events, "embedding.backward.workspace"), 0);
    EXPECT_EQ(count(cpu.events, ".backward.workspace"), 0);
    // the gradient's norm, unless the optimizer runs in backward (the whole gradient never exists)
    const bool norm = flags.find("--optimizer-in-backward") == std::string::npos;
    EXPECT_EQ(count(cuda.events, "grad_norm.accumulator") > 0, norm);
    EXPECT_EQ(count(cpu.events, "grad_norm.accumulator"), 0);
    EXPECT_EQ(count(cpu.events, ".f32"), 0) << "an fp32 copy of a 16-bit tensor";
    EXPECT_EQ(count(cuda.events, ".f32"), 0) << "an fp32 copy of a 16-bit tensor";
  }
}

// --pattern is the meta device's: a real device follows its own.
TEST(MetaDevice, PatternAppliesToMetaOnly) {
  const CliRun r = trainmem("train --device cpu --pattern cuda --steps 1");
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("--pattern cuda applies to --device meta"), std::string::npos) << r.err;
}

// The flags' rules that depend on the device are checked against the device the flags name before
// it is opened: cuDNN's attention on the CUDA pattern is accepted (it was refused as if on the
// CPU, which would also refuse `train --device cuda --attention cudnn` on a GPU), and on the CPU
// it is refused.
TEST(MetaDevice, CudnnAttentionFollowsTheNamedPattern) {
  const std::string flags = " --model tiny --dim 128 --heads 2 --precision bf16 --attention cudnn --steps 1";
  const CliRun cuda = trainmem("train --device meta --pattern cuda" + flags);
  EXPECT_EQ(cuda.exit_code, 0) << cuda.err;
  EXPECT_NE(cuda.out.find("attention=cudnn"), std::string::npos) << cuda.out;
  const CliRun cpu = trainmem("train --device meta" + flags);
  EXPECT_EQ(cpu.exit_code, 2) << cpu.err;
  EXPECT_NE(cpu.err.find("--attention cudnn needs a CUDA device"), std::string::npos) << cpu.err;
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
