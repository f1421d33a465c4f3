// The trainmem program from the outside: exit codes, one-line errors, JSON on stdout.
// Each test runs the real binary (TRAINMEM_BINARY) through the shell, with stdout read from a
// pipe and stderr redirected to a file, so the two are checked separately.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/data/token_file.h"
#include "common/model/model_config.h"
#include "common/tests/sanitizers.h"
#include "common/tests/command_runner.h"
#include "suites/trainmem/tests/trainmem_program.h"

namespace trainmem {
namespace {

constexpr long long kMiB = 1 << 20;

using testing_support::count_lines;
using testing_support::read_text_file;
using cli_test::CliRun;
using cli_test::temp_path;
using cli_test::trainmem;



std::string data(const char* name) { return std::string(TRAINMEM_CLI_TEST_DATA_DIR) + "/" + name; }

// An input error: exit 2, nothing on stdout, exactly one line on stderr that starts with
// "trainmem: error: " and contains `expected`.
void expect_input_error(const std::string& args, const std::string& expected) {
  SCOPED_TRACE("trainmem " + args);
  const CliRun r = trainmem(args);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_EQ(count_lines(r.err), 1) << r.err;
  EXPECT_EQ(r.err.rfind("trainmem: error: ", 0), 0u) << r.err;
  EXPECT_NE(r.err.find(expected), std::string::npos) << "expected '" << expected << "' in: " << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
}

nlohmann::json parse_json(const std::string& text) {
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    ADD_FAILURE() << "stdout is not JSON: " << e.what() << "\n" << text;
    return nlohmann::json::object();
  }
}

// --- Help

TEST(Cli, HelpWorksForTheProgramAndEverySubcommand) {
  CliRun r = trainmem("--help");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.out.find("replay"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("info"), std::string::npos) << r.out;
  EXPECT_TRUE(r.err.empty()) << r.err;

  r = trainmem("replay --help");
  EXPECT_EQ(r.exit_code, 0);
  for (const char* flag : {"TRACE", "--allocator-config", "--device-memory"})
    EXPECT_NE(r.out.find(flag), std::string::npos) << flag << " in\n" << r.out;

  r = trainmem("info --help");
  EXPECT_EQ(r.exit_code, 0);
  for (const char* flag : {"--device ", "--device-memory", "--allocator-config", "--json"})
    EXPECT_NE(r.out.find(flag), std::string::npos) << flag << " in\n" << r.out;
}

// --version: the project's version, from CMake's project(VERSION) (before: an unknown flag, exit 2).
TEST(Cli, VersionPrintsTheProjectsVersion) {
  const CliRun r = trainmem("--version");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, std::string("trainmem ") + TRAINMEM_PROJECT_VERSION + "\n");
  EXPECT_TRUE(r.err.empty()) << r.err;
  expect_input_error("train --mdoel tiny", "did you mean --model");
}

// --- Wrong command lines: exit 2, one line

TEST(Cli, WrongFlagsAndValuesAreOneLineErrors) {
  expect_input_error("info --no-such-flag", "--no-such-flag");
  expect_input_error("replay " + data("small_trace.json") + " --bogus", "--bogus");
  expect_input_error("", "name a command: info, replay, train, estimate, plan, max-batch, tokens");
  expect_input_error("frobnicate", "unknown command 'frobnicate'");
  expect_input_error("--bogus", "unknown flag '--bogus'");
  expect_input_error("replay", "TRACE");
  expect_input_error("info --device gpu", "--device");
  expect_input_error("info --device-memory '12 parsecs'", "--device-memory: cannot read size '12 parsecs'");
  expect_input_error("replay " + data("small_trace.json") + " --device-memory '12 parsecs'", "12 parsecs");
  expect_input_error("replay " + data("small_trace.json") + " --allocator-config max_split_size_mb:5", "at least 20");
  expect_input_error("replay " + data("small_trace.json") + " --allocator-config colour:blue",
                     "--allocator-config: allocator config: unknown key 'colour'");
}

// CLI11's errors reach users in our words (the kinds one by one: test_cli_parse_errors.cpp), with
// the command's --help to read.
TEST(Cli, ParseErrorsNameTheFlagWhatWasGivenAndWhatItTakes) {
  const CliRun r = trainmem("train --pinned maybe");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err,
            "trainmem: error: --pinned takes on|off (or true/false, yes/no, 1/0), not 'maybe'. Run 'trainmem train "
            "--help' for usage.\n");
  expect_input_error("train --steps 1 --steps 2", "--steps is given 2 times; give it once. Run 'trainmem train --help'");
  expect_input_error("info --device gpu", "--device takes one of auto, cpu, cuda, meta, not 'gpu'");
}

// An empty path wrote nothing and exited 0; two output flags naming one file kept one of them.
// Every output flag of every command is refused the same way, before any work.
TEST(Cli, OutputFlagsNeedAPathEachOfItsOwn) {
  const std::string trace = data("small_trace.json");
  const std::vector<std::pair<std::string, std::string>> empty_paths = {
      {"train --steps 1 --json ''", "--json"},
      {"train --steps 1 --record-memory ''", "--record-memory"},
      {"train --steps 1 --memory-snapshot ''", "--memory-snapshot"},
      {"replay " + trace + " --record ''", "--record"},
      {"tokens --out ''", "--out"}};
  for (const auto& [args, flag] : empty_paths)
    expect_input_error(args, flag + ": needs the path of the file to write; an empty path names no file");
  const std::string path = temp_path("same.json");
  expect_input_error("train --steps 1 --json " + path + " --record-memory " + path,
                     "--json and --record-memory both name the file " + path + ": give each its own");
  expect_input_error("train --steps 1 --record-memory " + path + " --memory-snapshot " + path,
                     "--record-memory and --memory-snapshot both name the file " + path);
  const std::string folder = path.substr(0, path.rfind('/'));
  expect_input_error("train --steps 1 --json " + path + " --memory-snapshot " + folder + "/./" + path.substr(path.rfind('/') + 1),
                     "--json " + path + " and --memory-snapshot " + folder + "/./");
  EXPECT_FALSE(std::ifstream(path).good()) << "nothing is written";
}

TEST(Cli, MalformedTraceFilesAreOneLineErrorsNamingTheFile) {
  expect_input_error("replay /nonexistent/trace.json", "/nonexistent/trace.json: no such file");
  expect_input_error("replay " + data("invalid_json.json"), "invalid_json.json: not valid JSON: parse error at line 2");
  expect_input_error("replay " + data("free_unknown_id.json"),
                     "free_unknown_id.json: event 1: free of id 5 which is not allocated");
}

// --- Replays

// small_trace.json, by hand (ANCHORS.md rules):
//   alloc 1000 B (activations)  -> 1024 B block in a new 2 MiB small segment
//   alloc 5 MiB (parameters)    -> a new 20 MiB large segment, split
//   alloc 3000 B                -> 3072 B block from the rest of the small segment
//   free all three              -> allocated 0; both segments stay cached (no empty_cache)
TEST(Cli, ReplayPrintsStatisticsAsJson) {
  const CliRun r = trainmem("replay " + data("small_trace.json") + " --device-memory 1GiB --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = parse_json(r.out);
  EXPECT_EQ(j["device_memory_bytes"], 1024 * kMiB);
  EXPECT_EQ(j["events"], 6);
  EXPECT_EQ(j["events_replayed"], 6);
  EXPECT_TRUE(j["oom"].is_null());
  EXPECT_EQ(j["summary"]["peak_allocated_bytes"], 1024 + 5 * kMiB + 3072);
  EXPECT_EQ(j["summary"]["peak_reserved_bytes"], 22 * kMiB);
  EXPECT_EQ(j["summary"]["final_allocated_bytes"], 0);
  EXPECT_EQ(j["summary"]["final_reserved_bytes"], 22 * kMiB);
  EXPECT_EQ(j["summary"]["num_device_alloc"], 2);
  EXPECT_EQ(j["summary"]["num_device_free"], 0);
  EXPECT_EQ(j["memory_stats"]["requested_bytes.all.peak"], 1000 + 5 * kMiB + 3000);
  EXPECT_EQ(j["memory_stats"]["by_category.activations.peak"], 1024);
  EXPECT_EQ(j["memory_stats"]["by_category.parameters.peak"], 5 * kMiB);
  EXPECT_EQ(j["segments"].size(), 2u);
  EXPECT_EQ(j["device"]["device_memory_bytes"], 1024 * kMiB);  // every result says what ran it
  EXPECT_NE(j["device"]["name"].get<std::string>().find("simulated"), std::string::npos);
}

TEST(Cli, RawBackendAsksTheDeviceForEveryAllocation) {
  const CliRun r = trainmem("replay " + data("small_trace.json") + " --allocator-config backend:raw --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = parse_json(r.out);
  EXPECT_EQ(j["allocator_config"].get<std::string>().find("backend:raw"), 0u);
  EXPECT_EQ(j["summary"]["num_device_alloc"], 3);  // one per alloc in the trace
  EXPECT_EQ(j["summary"]["num_device_free"], 3);
  EXPECT_EQ(j["summary"]["peak_reserved_bytes"], 1024 + 5 * kMiB + 3072);  // no segment rounding
  EXPECT_EQ(j["summary"]["final_reserved_bytes"], 0);
}

// oom_trace.json: three 12 MiB allocations on a 30 MiB card; the third fails (event 2).
TEST(Cli, AnOomInAReplayPrintsTheResultAndTheReportAndExits1) {
  const CliRun r = trainmem("replay " + data("oom_trace.json") + " --device-memory 30MiB --json");
  EXPECT_EQ(r.exit_code, 1) << r.err;
  const nlohmann::json j = parse_json(r.out);
  ASSERT_TRUE(j.contains("oom"));
  ASSERT_TRUE(j["oom"].is_object());
  EXPECT_EQ(j["oom"]["event_index"], 2);
  EXPECT_EQ(j["oom"]["requested_bytes"], 12 * kMiB);
  EXPECT_EQ(j["oom"]["capacity_bytes"], 30 * kMiB);
  EXPECT_EQ(j["events_replayed"], 2);
  EXPECT_EQ(j["summary"]["final_allocated_bytes"], 24 * kMiB);
  EXPECT_EQ(j["summary"]["num_ooms"], 1);
  EXPECT_NE(r.err.find("event 2 ran out of memory"), std::string::npos) << r.err;
}

TEST(Cli, ReplayCanRecordTheAllocatorsEventLog) {
  const std::string path = temp_path("record.json");
  const CliRun r = trainmem("replay " + data("small_trace.json") + " --json --record '" + path + "'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json log = parse_json(read_text_file(path));
  std::remove(path.c_str());
  ASSERT_TRUE(log.contains("events"));
  ASSERT_GE(log["events"].size(), 2u);
  EXPECT_EQ(log["events"][0]["action"], "segment_alloc");
  EXPECT_EQ(log["events"][1]["action"], "alloc");
  EXPECT_EQ(log["events"][1]["size"], 1000);
}

// --- info

TEST(Cli, InfoJsonDescribesTheDeviceAndItsBudget) {
  const CliRun r = trainmem("info --device cpu --device-memory 8GiB --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = parse_json(r.out);
  EXPECT_EQ(j["device"]["kind"], "cpu");
  EXPECT_EQ(j["device"]["device_memory_bytes"], 8192 * kMiB);
  const nlohmann::json& constants = j["allocator"]["constants"];
  EXPECT_EQ(constants["min_block_size"], 512);
  EXPECT_EQ(constants["small_size"], kMiB);
  EXPECT_EQ(constants["small_buffer"], 2 * kMiB);
  EXPECT_EQ(constants["min_large_alloc"], 10 * kMiB);
  EXPECT_EQ(constants["large_buffer"], 20 * kMiB);
  EXPECT_EQ(constants["round_large"], 2 * kMiB);
  EXPECT_TRUE(j["allocator"]["max_split_size_bytes"].is_null());  // unlimited by default
}

TEST(Cli, InfoTextShowsTheAllocatorPolicy) {
  const CliRun r = trainmem("info --device cpu --allocator-config max_split_size_mb:64");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* text : {"device cpu", "16.00 GiB", "512 B", "2.00 MiB", "20.00 MiB", "max_split_size", "64.00 MiB"})
    EXPECT_NE(r.out.find(text), std::string::npos) << text << " in\n" << r.out;
}

// --- train

TEST(Cli, TrainPrintsAProgressLinePerStepAndWritesItsResult) {
  const std::string json_path = temp_path("train_result.json");
  const CliRun r = trainmem("train --device cpu --model tiny --steps 3 --batch 2 --json " + json_path);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // Not a terminal (stdout is a pipe): one line per step with every field, none redrawn, then the summary.
  EXPECT_EQ(count_lines(r.out), 4) << r.out;
  EXPECT_EQ(r.out.find('\r'), std::string::npos) << r.out;
  for (const char* text : {"step    3/3", "fp32 accum=1 recompute=none attention=naive", "loss ", "ms", "tok/s", "mem ", "peak ", "ETA "})
    EXPECT_NE(r.out.find(text), std::string::npos) << text << " in\n" << r.out;
  // The summary's peaks are the last step's ("peak ALLOCATED/RESERVED"), in binary units.
  const std::size_t summary_at = r.out.find("done: 3 steps in ");
  ASSERT_NE(summary_at, std::string::npos) << r.out;
  const std::string summary = r.out.substr(summary_at), last_step = r.out.substr(0, summary_at);
  const std::size_t peak_at = last_step.rfind("peak ") + 5, slash = last_step.find('/', peak_at);
  const std::size_t peak_end = last_step.find_first_of(" |\n", last_step.find(' ', slash + 1) + 1);
  const std::string peak_allocated = last_step.substr(peak_at, slash - peak_at);
  const std::string peak_reserved = last_step.substr(slash + 1, peak_end - slash - 1);
  for (const std::string& text : {std::string("mean step "), std::string(" tok/s"), "peak allocated " + peak_allocated,
                                  "peak reserved " + peak_reserved, std::string(" MiB")})
    EXPECT_NE(summary.find(text), std::string::npos) << text << " in\n" << summary;
  const nlohmann::json j = parse_json(read_text_file(json_path));
  EXPECT_EQ(j["config"]["model"]["name"], "tiny");
  EXPECT_EQ(j["config"]["batch"], 2);
  EXPECT_EQ(j["device"]["kind"], "cpu");
  ASSERT_EQ(j["steps"].size(), 3u);
  for (const char* key : {"step", "loss", "ms", "tokens_per_s", "allocated_bytes", "reserved_bytes"})
    EXPECT_TRUE(j["steps"][0].contains(key)) << key;
  EXPECT_GT(j["memory"]["peak_allocated_bytes"], 0);
  EXPECT_GE(j["memory"]["peak_reserved_bytes"], j["memory"]["peak_allocated_bytes"]);
  EXPECT_GT(j["memory"]["by_category"]["activations"]["peak_bytes"], 0);
  EXPECT_TRUE(j["memory"]["stats"].contains("allocated_bytes.all.peak"));
}

TEST(Cli, TrainInputErrorsAreOneLine) {
  expect_input_error("train --model gpt5", "unknown model 'gpt5'");
  expect_input_error("train --data /nonexistent/corpus.txt", "no such file");
  expect_input_error("train --model tiny --heads 5", "not divisible");
  expect_input_error("train --batch 0", "--batch");
  expect_input_error("train --recompute half", "none, full, selective, sqrt or every:K");
  expect_input_error("train --accum 0", "--accum");
  expect_input_error("train --precision fp8", "--precision takes one of fp32, fp16, bf16, not 'fp8'");
  expect_input_error("train --attention sparse", "--attention takes one of naive, flash, cudnn, not 'sparse'");
  expect_input_error("train --loader cloud", "--loader");
  expect_input_error("train --precision bf16 --loss-scale 1024", "only to --precision fp16");
  expect_input_error("train --precision fp16 --loss-scale-backoff 2", "--loss-scale-backoff");
}

// A flag that cannot work on the device found: exit 2 and the reason, after the device line.
TEST(Cli, CudnnAttentionOnTheCpuIsAnInputError) {
  const CliRun r = trainmem("train --device cpu --attention cudnn --steps 1");
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("trainmem: error: --attention cudnn needs a CUDA device; on the CPU use --attention flash"),
            std::string::npos)
      << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
}

// Lazy and eager loaders from the command line: both train, and the JSON config names them.
TEST(Cli, TrainWithEagerAndLazyLoaders) {
  const std::string json_path = temp_path("loader.json");
  for (const char* loader : {"eager", "lazy"}) {
    const CliRun r = trainmem(std::string("train --device cpu --model tiny --steps 2 --loader ") + loader + " --json " + json_path);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.out.find(std::string("loader=") + loader), std::string::npos) << r.out;
    EXPECT_EQ(parse_json(read_text_file(json_path))["config"]["loader"], loader);
  }
}

// A token file under the lazy loader is memory-mapped; a file too small for one batch is an input
// error from the loader, naming what one batch needs.
TEST(Cli, LazyLoaderMapsATokenFile) {
  const std::string path = temp_path("corpus.tok");
  trainmem::write_token_file(path, trainmem::synthetic_corpus(20000, 4));
  const CliRun r = trainmem("train --device cpu --model tiny --steps 2 --loader lazy --data " + path);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("loader=lazy"), std::string::npos) << r.out;

  const std::string tiny_path = temp_path("too_small.tok");
  trainmem::write_token_file(tiny_path, trainmem::synthetic_corpus(100, 4));
  const CliRun small = trainmem("train --device cpu --model tiny --steps 1 --loader lazy --data " + tiny_path);
  EXPECT_EQ(small.exit_code, 2) << small.err;
  EXPECT_NE(small.err.find("trainmem: error: "), std::string::npos) << small.err;
}

// The three single-device techniques on one command line: the progress line and the JSON config
// name each setting, and the run trains (loss falls) in 16 bits.
TEST(Cli, TrainComposesPrecisionRecomputeAndAccumulation) {
  const std::string json_path = temp_path("composed.json");
  const CliRun r = trainmem("train --device cpu --model tiny --precision bf16 --recompute selective --accum 8 --batch 1 "
                            "--steps 4 --json " + json_path);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("bf16 accum=8 recompute=selective"), std::string::npos) << r.out;
  const nlohmann::json j = parse_json(read_text_file(json_path));
  EXPECT_EQ(j["config"]["precision"], "bf16");
  EXPECT_EQ(j["config"]["recompute"], "selective");
  EXPECT_EQ(j["config"]["accum"], 8);
  EXPECT_EQ(j["config"]["tokens_per_step"], 8 * 64);
  EXPECT_LT(j["steps"][3]["loss"].get<double>(), j["steps"][0]["loss"].get<double>());

  const CliRun fp16 = trainmem("train --device cpu --model tiny --precision fp16 --loss-scale 512 --steps 2 --json " + json_path);
  ASSERT_EQ(fp16.exit_code, 0) << fp16.err;
  EXPECT_NE(fp16.out.find("scale=512"), std::string::npos) << fp16.out;
  const nlohmann::json k = parse_json(read_text_file(json_path));
  EXPECT_EQ(k["config"]["loss_scaler"]["init_scale"], 512.0);
  EXPECT_EQ(k["config"]["loss_scaler"]["growth_interval"], 2000);
  EXPECT_EQ(k["steps"][0]["loss_scale"], 512.0);
}

TEST(Cli, TrainThatCannotFitGivesTheOomReportAndExits1) {
  const CliRun r = trainmem("train --device cpu --model small --batch 64 --device-memory 64MiB --steps 1");
  EXPECT_EQ(r.exit_code, 1);
  for (const char* text : {"out of memory", "activations=", "what would help", "--accum"})
    EXPECT_NE(r.err.find(text), std::string::npos) << text << " in\n" << r.err;
}

// --- estimate and max-batch (suites/trainmem/estimator)

// The estimate of a run equals what `trainmem train` then measures, byte for byte: peak allocated,
// peak reserved and every category's peak (the same two steps).
TEST(Cli, EstimateEqualsWhatTrainMeasures) {
  const std::string json_path = temp_path("measured.json");
  const std::string config = "--device cpu --model tiny --batch 8 --precision bf16 --recompute selective --loader lazy";
  const CliRun e = trainmem("estimate " + config + " --json");
  ASSERT_EQ(e.exit_code, 0) << e.err;
  const CliRun t = trainmem("train " + config + " --steps 2 --json " + json_path);
  ASSERT_EQ(t.exit_code, 0) << t.err;
  const nlohmann::json predicted = parse_json(e.out), measured = parse_json(read_text_file(json_path));
  EXPECT_EQ(predicted["peak_allocated_bytes"], measured["memory"]["peak_allocated_bytes"]);
  EXPECT_EQ(predicted["peak_reserved_bytes"], measured["memory"]["peak_reserved_bytes"]);
  for (const char* c : {"parameters", "gradients", "optimizer_state", "activations", "workspace", "data"})
    EXPECT_EQ(predicted["by_category"][c]["peak_bytes"], measured["memory"]["by_category"][c]["peak_bytes"]) << c;
}

// A model far too large to run here, sized for a named card: the table, the 16 bytes per
// parameter, whether it fits and the largest micro-batch.
TEST(Cli, EstimateTableForALargeModelOnANamedGpu) {
  const CliRun r = trainmem("estimate --model gpt2-1.5b --precision bf16 --attention flash --gpu h100-80gb");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* text : {"1557686400 parameters", "16 bytes per parameter", "activations", "peak allocated",
                           "peak reserved", "the peak: ", "h100-80gb", "fits: yes", "largest micro-batch that fits: "})
    EXPECT_NE(r.out.find(text), std::string::npos) << text << " in\n" << r.out;
  const CliRun big = trainmem("estimate --model gpt2-1.5b --batch 64 --gpu rtx4090-24gb --json");
  ASSERT_EQ(big.exit_code, 0) << big.err;
  const nlohmann::json j = parse_json(big.out);
  EXPECT_FALSE(j["device"]["fits"].get<bool>());
  EXPECT_EQ(j["config"]["backend"], "cuda");
}

// The ZeRO paper's 7.5B model on 64 ranks, given by flags: 1.9 GB of model states per rank
// with ZeRO-3 (16 Psi / 64).
TEST(Cli, EstimateShardedOverRanks) {
  const CliRun r = trainmem("estimate --layers 36 --dim 4096 --heads 32 --seq 4096 --vocab 57019 --batch 1 "
                            "--precision bf16 --attention flash --recompute full --gpu a100-80gb --world-size 64 "
                            "--zero 3 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = parse_json(r.out);
  EXPECT_EQ(j["num_parameters"], 7500029952LL);  // V = 57019 padded to 57024 (test_estimator.cpp)
  EXPECT_NEAR(j["sharding"]["paper_per_rank_bytes"]["model_states"].get<double>() / 1e9, 1.875, 1e-3);
  EXPECT_EQ(j["sharding"]["world_size"], 64);
  EXPECT_TRUE(j["device"]["fits"].get<bool>());
}

// Issue 27, item 4: with --zero 3 --world-size 8 the "suite formula" column showed the unsharded
// model states beside one rank's meta-run peaks (parameters 587 MiB beside 2.90 GiB for a larger
// model), the model-state block switched to decimal GB, and a prediction was labelled "measured".
// Now: binary units only (as PyTorch prints memory), one rank's formula beside one rank's run,
// and the run called what it is, a meta run.
TEST(Cli, ShardedEstimateComparesLikeWithLikeInOneUnitSystem) {
  const std::string config = "estimate --device cpu --model small --batch 2 --zero 3 --world-size 8 --device-memory 1GiB";
  const CliRun table = trainmem(config);
  ASSERT_EQ(table.exit_code, 0) << table.err;
  const CliRun j = trainmem(config + " --json");
  ASSERT_EQ(j.exit_code, 0) << j.err;
  const nlohmann::json e = parse_json(j.out);

  // One unit system: no decimal GB/MB/kB next to a number; the binary ones are there.
  for (const char* decimal : {" GB", " MB", " kB", " KB", " TB"})
    EXPECT_EQ(table.out.find(decimal), std::string::npos) << decimal << " in\n" << table.out;
  EXPECT_NE(table.out.find(" MiB"), std::string::npos) << table.out;
  // Labels: nothing here is measured on a device; the figures are a meta run's.
  EXPECT_EQ(table.out.find("measured"), std::string::npos) << table.out;
  EXPECT_NE(table.out.find("meta run"), std::string::npos) << table.out;

  // Like with like: each model-state category's formula is one rank's peak, as its meta-run
  // figure is. The meta run holds at least what the exact formula counts (both round each tensor
  // to 512 bytes; the allocator may hand out a block whole, never less).
  const nlohmann::json& per_rank = e["sharding"]["formula_per_rank_bytes"];
  for (const char* c : {"parameters", "gradients", "optimizer_state"}) {
    SCOPED_TRACE(c);
    const nlohmann::json& row = e["by_category"][c];
    EXPECT_EQ(row["formula_bytes"], per_rank[std::string(c) + "_peak"]) << e["sharding"].dump();
    EXPECT_LE(row["formula_bytes"].get<long long>(), row["peak_bytes"].get<long long>());
  }
}

// Issue 27, item 5: a train command line pasted into estimate failed on --steps and --seed. Now it
// is estimated as it stands, and the flags that change no memory a step holds are named once as
// ignored; the rest of the output is that of the line without them, and no file is written.
TEST(Cli, EstimateTakesATrainCommandLineAndSaysWhatItIgnores) {
  const std::string run = "--device cpu --model tiny --batch 4 --precision bf16 --device-memory 64MiB";
  const std::string result = temp_path("pasted.json");
  const std::vector<std::string> train_only = {"--steps 7", "--seed 3", "--lr 0.01", "--weight-decay 0.1",
                                               "--json " + result};
  std::string pasted_flags;
  for (const std::string& f : train_only) pasted_flags += " " + f;
  const CliRun pasted = trainmem("estimate " + run + pasted_flags);
  ASSERT_EQ(pasted.exit_code, 0) << pasted.err;
  const std::string heading = "ignored (they change no memory a step holds): ";
  const std::size_t at = pasted.out.find(heading);
  ASSERT_NE(at, std::string::npos) << pasted.out;
  EXPECT_EQ(pasted.out.find(heading, at + 1), std::string::npos) << "said twice:\n" << pasted.out;
  const std::size_t end = pasted.out.find('\n', at);
  const std::string line = pasted.out.substr(at, end - at);
  for (const std::string& f : train_only) EXPECT_NE(line.find(f), std::string::npos) << f << " in: " << line;
  const CliRun plain = trainmem("estimate " + run);
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  EXPECT_EQ(pasted.out.substr(0, at) + pasted.out.substr(end + 1), plain.out);
  EXPECT_FALSE(std::ifstream(result).good()) << "estimate wrote train's result file";

  // --json alone still prints JSON, which lists what it ignored.
  const CliRun j = trainmem("estimate " + run + " --steps 7 --seed 3 --json");
  ASSERT_EQ(j.exit_code, 0) << j.err;
  EXPECT_EQ(parse_json(j.out)["ignored_flags"], nlohmann::json({"--steps 7", "--seed 3"}));
}

TEST(Cli, EstimateWrongFlagsAreOneLineErrors) {
  expect_input_error("estimate --gpu h100", "h100-80gb");
  expect_input_error("estimate --gpu h100-80gb --device-memory 1GiB", "not both");
  expect_input_error("estimate --world-size 0", "--world-size");
  expect_input_error("estimate --offload optimizer", "--offload");
  expect_input_error("max-batch --limit 0", "--limit");
}

// max-batch tries real runs and finds what the estimator predicted: B fits, B+1 does not.
TEST(Cli, MaxBatchFindsTheEstimatorsAnswerByTrying) {
  const CliRun r = trainmem("max-batch --device cpu --model tiny --device-memory 24MiB --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = parse_json(r.out);
  const auto best = j["max_batch"].get<long long>();
  EXPECT_GT(best, 1);
  EXPECT_EQ(j["predicted_max_batch"].get<long long>(), best);
  bool fit_seen = false, oom_seen = false;
  for (const nlohmann::json& t : j["trials"]) {
    if (t["batch"] == best) fit_seen = t["fits"].get<bool>();
    if (t["batch"] == best + 1) oom_seen = !t["fits"].get<bool>();
  }
  EXPECT_TRUE(fit_seen && oom_seen) << j["trials"].dump();
}

// max-batch --gpu NAME tries the runs with that card's usable memory, the estimate's figure for it.
TEST(Cli, MaxBatchTakesAGpuAsEstimateDoes) {
  const CliRun estimate = trainmem("estimate --model tiny --gpu t4-16gb --json");
  ASSERT_EQ(estimate.exit_code, 0) << estimate.err;
  const CliRun r = trainmem("max-batch --device cpu --model tiny --gpu T4-16GB --limit 2 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = parse_json(r.out);
  EXPECT_EQ(j["capacity_bytes"], parse_json(estimate.out)["device"]["usable_bytes"]);
  EXPECT_EQ(j["max_batch"], 2);
  EXPECT_NE(j["device"].get<std::string>().find("T4"), std::string::npos) << j["device"];
  expect_input_error("max-batch --gpu t4-16gb --device-memory 1GiB", "not both");
  expect_input_error("max-batch --gpu t5", "--gpu: must be one of");
}

// Issue 27, item 2: whether a run fits is not monotone in the micro-batch (the allocator packs some
// batches' segments worse than larger ones'), and the search assumed it was: it bisected, and said
// 34 for gpt2-124m on 16 GiB in bf16 with selective recompute, where 35 and 36 do not fit and 37,
// 38 and 40 do. Now every batch is tried up to one past which none can fit. On a case with a hole
// (small on 116 MiB, where the bisection said 15: 16 does not fit, 17 does): the largest reported
// fits, every batch above it up to the search's end does not, and the end is proven (its live
// tensors alone exceed the device); below the largest, the holes named do not fit and every other
// batch does. Each checked by a meta run of its own (`train --device meta`), and max-batch's real
// runs find the same.
TEST(Cli, LargestMicroBatchIsTheLargestAndItsHolesAreNamed) {
  TRAINMEM_SKIP_UNDER_SANITIZERS("Estimator.LargestFittingBatchIsTheRealOne and CliData's max-batch tests");
  const long long capacity = 116 * kMiB;
  const std::string model = "--model small";
  const std::string config = model + " --device-memory " + std::to_string(capacity);
  const CliRun e = trainmem("estimate --device cpu " + config + " --json");
  ASSERT_EQ(e.exit_code, 0) << e.err;
  const nlohmann::json device = parse_json(e.out)["device"];
  const auto largest = device["max_batch"].get<long long>();
  const auto holes = device.value("max_batch_holes", std::vector<long long>{});
  EXPECT_FALSE(holes.empty()) << "no longer a case with holes: " << device.dump();

  // Each batch by a meta run of its own, from 1 up to the first past the largest whose live
  // tensors alone (its peak allocated on an unlimited device) exceed the device: none beyond fits.
  auto fits = [&](long long b) {
    const CliRun r = trainmem("train --device meta --steps 2 " + config + " --batch " + std::to_string(b));
    EXPECT_TRUE(r.exit_code == 0 || r.err.find("out of memory") != std::string::npos) << r.err;
    return r.exit_code == 0;
  };
  auto past_the_end = [&](long long b) {
    const CliRun r = trainmem("estimate --device cpu --json " + model + " --batch " + std::to_string(b));
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return parse_json(r.out)["peak_allocated_bytes"].get<long long>() > capacity;
  };
  long long b = 1;
  for (; b <= largest || !past_the_end(b); ++b) {
    const bool hole = std::find(holes.begin(), holes.end(), b) != holes.end();
    EXPECT_EQ(fits(b), b <= largest && !hole) << "B=" << b << (hole ? " (a hole)" : "") << ", the largest " << largest;
    ASSERT_LT(b, 4 * largest + 64) << "the run of misses does not end";  // a guard on this loop only
  }
  EXPECT_FALSE(fits(b));
  EXPECT_EQ(device["max_batch_search_end"], b) << device.dump();

  // The table names them; max-batch, by real runs, finds the same.
  const CliRun table = trainmem("estimate --device cpu " + config);
  std::string named;
  for (std::size_t i = 0; i < holes.size(); ++i)
    named += (i == 0 ? "" : i + 1 == holes.size() ? " and " : ", ") + std::to_string(holes[i]);
  EXPECT_NE(table.out.find("largest micro-batch that fits: " + std::to_string(largest) + "\n"), std::string::npos)
      << table.out;
  EXPECT_NE(table.out.find("below it, these do not fit: " + named + " "), std::string::npos) << table.out;
  const CliRun tried = trainmem("max-batch --device cpu " + config + " --json");
  ASSERT_EQ(tried.exit_code, 0) << tried.err;
  const nlohmann::json j = parse_json(tried.out);
  EXPECT_EQ(j["max_batch"], largest);
  EXPECT_EQ(j["max_batch_holes"], device["max_batch_holes"]);
  EXPECT_EQ(j["max_batch_search_end"], b);
  EXPECT_EQ(j["predicted_max_batch"], largest);
  EXPECT_EQ(j["predicted_holes"], device["max_batch_holes"]);
}

// Issue 27, item 3: gpt2-1.5b in bf16 with flash attention, full recompute and B=1 does not fit
// 24 GiB (its model states alone are 16 bytes a parameter). estimate printed "fits: NO" and no
// advice; train's advice never proposed ZeRO-Offload, the standard answer on one GPU. Now the
// three commands give the one advisor's lines, offload among the remedies at world size 1, and
// the command proposed fits (its meta run: estimate, train --device meta, max-batch on meta).
TEST(Cli, EveryCommandProposesOffloadThatFitsWhenNothingElseDoes) {
  const std::string run = "--model gpt2-1.5b --precision bf16 --attention flash --recompute full --batch 1";
  const std::string device = "--device-memory 24GiB";
  // The first advice line: "FLAGS would bring the peak reserved from ... to ..."
  auto proposed = [](const std::string& text) {
    const std::string marker = "  - ", would = " would bring the peak reserved from ";
    const std::size_t at = text.find(would);
    if (at == std::string::npos) return std::string();
    const std::size_t start = text.rfind(marker, at);
    return start == std::string::npos ? std::string() : text.substr(start + marker.size(), at - start - marker.size());
  };
  const CliRun estimate = trainmem("estimate --device cpu " + run + " " + device);
  const CliRun train = trainmem("train --device cpu --steps 1 " + run + " " + device);
  const CliRun max_batch = trainmem("max-batch --device meta " + run + " " + device);
  EXPECT_EQ(estimate.exit_code, 0) << estimate.err;
  EXPECT_NE(estimate.out.find("fits: NO"), std::string::npos) << estimate.out;
  EXPECT_EQ(train.exit_code, 1) << train.err;  // stopped before the first step (the meta run ran out of memory)
  EXPECT_EQ(max_batch.exit_code, 0) << max_batch.err;
  EXPECT_NE(max_batch.out.find("largest micro-batch that fits: none"), std::string::npos) << max_batch.out;
  const std::string flags = proposed(estimate.out);
  EXPECT_NE(flags.find("--offload optimizer"), std::string::npos) << estimate.out;
  EXPECT_EQ(proposed(train.err), flags) << train.err;
  EXPECT_EQ(proposed(max_batch.out), flags) << max_batch.out;

  const CliRun fixed = trainmem("estimate --device cpu --json " + run + " " + device + " " + flags);
  ASSERT_EQ(fixed.exit_code, 0) << fixed.err;
  EXPECT_TRUE(parse_json(fixed.out)["device"]["fits"].get<bool>()) << fixed.out;
  const CliRun trained = trainmem("train --device meta --steps 2 " + run + " " + device + " " + flags);
  EXPECT_EQ(trained.exit_code, 0) << trained.err;
  const CliRun tried = trainmem("max-batch --device meta --json " + run + " " + device + " " + flags);
  ASSERT_EQ(tried.exit_code, 0) << tried.err;
  EXPECT_GE(parse_json(tried.out)["max_batch"].get<long long>(), 1) << tried.out;
}

// Out of memory, the report names the cheapest technique that makes the run fit, with the figures.
// (bf16 halves the activations, and its kernels make no fp32 copies: it comes before smaller
// micro-batches in the cost order, estimator/oom_advice.cpp.)
TEST(Cli, OomReportNamesTheCheapestTechniqueThatFits) {
  const CliRun r = trainmem("train --device cpu --model tiny --batch 24 --device-memory 24MiB --steps 2");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("--precision bf16 would bring the peak reserved from 28.00 MiB to 12.00 MiB"), std::string::npos)
      << r.err;
}


// --memory-snapshot writes PyTorch's snapshot structure (torch.cuda.memory._snapshot()): segments
// with their blocks, and one trace per device with PyTorch's action names, which replays to the
// segments left at the end. With expandable segments the trace maps pages instead.
TEST(Cli, TrainWritesAMemorySnapshotInPyTorchsStructure) {
  const std::string path = temp_path("snapshot.json");
  const CliRun r = trainmem("train --device cpu --model tiny --steps 2 --memory-snapshot " + path);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json s = parse_json(read_text_file(path));
  ASSERT_TRUE(s["segments"].is_array() && !s["segments"].empty());
  long long reserved = 0;
  for (const nlohmann::json& seg : s["segments"]) {
    for (const char* key : {"address", "total_size", "stream", "allocated_size", "active_size", "requested_size"})
      EXPECT_TRUE(seg[key].is_number_integer()) << key;
    EXPECT_TRUE(seg["segment_type"] == "small" || seg["segment_type"] == "large");
    long long tiled = 0;
    for (const nlohmann::json& b : seg["blocks"]) {
      EXPECT_TRUE(b["state"] == "active_allocated" || b["state"] == "active_awaiting_free" || b["state"] == "inactive");
      EXPECT_TRUE(b["frames"].is_array());
      tiled += b["size"].get<long long>();
    }
    EXPECT_EQ(tiled, seg["total_size"].get<long long>());  // the blocks tile their segment
    reserved += seg["total_size"].get<long long>();
  }
  ASSERT_EQ(s["device_traces"].size(), 1u);  // one list per device
  const std::string pytorch_actions = " alloc free_requested free_completed segment_alloc segment_free segment_map "
                                      "segment_unmap oom snapshot ";
  long long segment_bytes = 0, segments = 0, allocs = 0;
  for (const nlohmann::json& e : s["device_traces"][0]) {
    const std::string action = e["action"].get<std::string>();
    EXPECT_NE(pytorch_actions.find(" " + action + " "), std::string::npos) << action;
    for (const char* key : {"addr", "size", "stream"}) EXPECT_TRUE(e[key].is_number_integer()) << key;
    if (action == "segment_alloc") {
      segment_bytes += e["size"].get<long long>();
      ++segments;
    } else if (action == "segment_free") {
      segment_bytes -= e["size"].get<long long>();
      --segments;
    } else if (action == "alloc") {
      ++allocs;
    }
  }
  EXPECT_GT(allocs, 100);
  EXPECT_EQ(segments, static_cast<long long>(s["segments"].size()));
  EXPECT_EQ(segment_bytes, reserved);

  const CliRun x = trainmem("train --device cpu --model tiny --steps 2 --allocator-config expandable_segments:True "
                            "--memory-snapshot " + path);
  ASSERT_EQ(x.exit_code, 0) << x.err;
  const std::string trace = parse_json(read_text_file(path))["device_traces"].dump();
  EXPECT_NE(trace.find("\"segment_map\""), std::string::npos);
  EXPECT_EQ(trace.find("\"segment_alloc\""), std::string::npos);
  std::remove(path.c_str());
}

}  // namespace
}  // namespace trainmem

namespace trainmem {
namespace {

// The Llama family's shapes (issue 29, the model description): `trainmem info` names the family
// and gives the published parameter count; its flags are refused on a GPT, naming what to change;
// and until its blocks are in the model, a run of it is refused saying so (not run as a GPT).
TEST(CliModels, InfoNamesTheFamilyAndTheParameters) {
  const CliRun r = trainmem("info --device cpu --model llama3-8b");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("model llama3-8b (llama)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("8030261248"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Hkv=8"), std::string::npos) << r.out;
  const CliRun j = trainmem("info --device cpu --json --model gpt2-124m");
  ASSERT_EQ(j.exit_code, 0) << j.err;
  const nlohmann::json info = nlohmann::json::parse(j.out);
  EXPECT_EQ(info["model"]["arch"], "gpt");
  EXPECT_EQ(info["model"]["parameters"], 124475904);
  const CliRun custom = trainmem("info --device cpu --json --model llama-tiny --kv-heads 1");
  ASSERT_EQ(custom.exit_code, 0) << custom.err;
  const nlohmann::json tiny = nlohmann::json::parse(custom.out)["model"];
  EXPECT_EQ(tiny["name"], "custom (from llama-tiny)");
  EXPECT_EQ(tiny["origin"], "from llama-tiny with --kv-heads 1");
  EXPECT_EQ(tiny["kv_heads"], 1);
}

TEST(CliModels, LlamaFlagsOnAGptAndAMismatchedArchAreRefused) {
  expect_input_error("info --model gpt2-124m --kv-heads 4", "--kv-heads is the Llama family's");
  expect_input_error("train --rope-theta 500000", "--rope-theta is the Llama family's");
  expect_input_error("info --model llama2-7b --arch gpt", "--arch gpt but --model llama2-7b is a llama");
  expect_input_error("info --arch mamba", "--arch takes one of gpt, llama, not 'mamba'");
  expect_input_error("info --model llama-tiny --kv-heads 3", "--kv-heads 3");
}

// A Llama trains, and its result names the family: the config's arch, the parameters the
// presets publish (common/tests/test_parameter_table.cpp checks them against the papers).
TEST(CliModels, ALlamaTrainsAndItsResultNamesTheFamily) {
  const std::string json_path = temp_path("llama.json");
  const CliRun r = trainmem("train --model llama-tiny --steps 3 --json " + json_path);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("model: llama-tiny (llama), 125248 parameters (L=2 H=4 Hkv=2 C=64 F=176 T=64 V=256"),
            std::string::npos)
      << r.err;
  const nlohmann::json j = parse_json(read_text_file(json_path));
  EXPECT_EQ(j["config"]["model"]["arch"], "llama");
  EXPECT_EQ(j["config"]["model"]["kv_heads"], 2);
  EXPECT_EQ(j["config"]["model"]["parameters"], model_preset("llama-tiny").num_parameters());
  ASSERT_EQ(j["steps"].size(), 3u);
  EXPECT_LT(j["steps"][2]["loss"].get<double>(), j["steps"][0]["loss"].get<double>()) << "it learns";
  const CliRun e = trainmem("estimate --model llama3-8b --gpu h100-80gb --precision bf16 --json");
  ASSERT_EQ(e.exit_code, 0) << e.err;
  EXPECT_EQ(parse_json(e.out)["num_parameters"], 8030261248LL);  // Meta's published count
}

// --- Issue 40: a user's first hour

// Item 1: a shape given by flags inherited tiny's T=64 and V=256 in silence ("largest micro-batch
// that fits: 372" for a 300M model), and a 3.4B Llama was named llama-tiny+custom. Now the first
// line says what came from where; T and V not given are the family's usual values, said so.
TEST(CliShapes, AShapeOfYourOwnSaysWhatItFilledIn) {
  const CliRun gpt = trainmem("estimate --layers 24 --dim 1024 --heads 16 --gpu rtx4090-24gb --precision bf16 --json");
  ASSERT_EQ(gpt.exit_code, 0) << gpt.err;
  const nlohmann::json model = parse_json(gpt.out)["config"]["model"];
  EXPECT_EQ(model["name"], "custom");
  EXPECT_EQ(model["seq"], 1024);
  EXPECT_EQ(model["vocab"], 50257);
  EXPECT_EQ(model["origin"], "as given: --layers 24 --heads 16 --dim 1024; filled in: T=1024 (GPT-2's; no --seq), "
                             "V=50257 (GPT-2's; no --vocab)");
  const CliRun table = trainmem("estimate --layers 24 --dim 1024 --heads 16 --seq 2048 --gpu rtx4090-24gb");
  ASSERT_EQ(table.exit_code, 0) << table.err;
  EXPECT_EQ(table.out.rfind("model custom (gpt, as given: --layers 24 --heads 16 --dim 1024 --seq 2048; filled in: "
                            "V=50257 (GPT-2's; no --vocab)): ", 0), 0u) << table.out;

  // A Llama: K/V heads = heads (multi-head, as transformers' LlamaConfig), F by Meta's rule, T and V Llama 2's.
  const CliRun llama = trainmem("info --device cpu --json --arch llama --layers 26 --dim 3200 --heads 32");
  ASSERT_EQ(llama.exit_code, 0) << llama.err;
  const nlohmann::json l = parse_json(llama.out)["model"];
  EXPECT_EQ(l["name"], "custom");
  EXPECT_EQ(l["seq"], 4096);
  EXPECT_EQ(l["vocab"], 32000);
  EXPECT_EQ(l["kv_heads"], 32);
  EXPECT_EQ(l["ffn_dim"], 8704);  // 2/3 of 4 x 3200 = 8533, to a multiple of 256 (OpenLLaMA 3B's 8640 is its own)
  EXPECT_EQ(llama_ffn_dim(4096), 11008u);  // Llama 2 7B's

  // "custom (from P)" only for a preset the user named; the default model says it is the default.
  const CliRun from = trainmem("info --device cpu --json --model GPT2 --layers 2 --seq 128");
  ASSERT_EQ(from.exit_code, 0) << from.err;
  EXPECT_EQ(parse_json(from.out)["model"]["name"], "custom (from gpt2-124m)");
  EXPECT_EQ(parse_json(from.out)["model"]["origin"], "from gpt2-124m with --layers 2 --seq 128");
  const CliRun default_model = trainmem("info --device cpu --json --seq 32");
  ASSERT_EQ(default_model.exit_code, 0) << default_model.err;
  EXPECT_EQ(parse_json(default_model.out)["model"]["origin"], "from the default model tiny (no --model) with --seq 32");

  // L, H and C change everything: not given, they are asked for.
  expect_input_error("estimate --layers 24 --dim 1024", "a shape of your own needs --layers, --heads and --dim (missing: --heads)");
  expect_input_error("estimate --arch llama --kv-heads 1", "(missing: --layers, --heads, --dim)");
}

// Item 2: --vocab was refused above 65536 although the presets go beyond (Llama 3's 128256).
TEST(CliShapes, AnyVocabularyIsEstimated) {
  const CliRun r = trainmem("estimate --model llama-tiny --vocab 128256 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(parse_json(r.out)["config"]["model"]["vocab"], 128256);
  const CliRun m = trainmem("max-batch --device meta --model llama-tiny --vocab 128256 --limit 2 --json");
  ASSERT_EQ(m.exit_code, 0) << m.err;
  EXPECT_EQ(parse_json(m.out)["max_batch"], 2);
}

// Item 3: misspelled names get the nearest ones, as flags do; the unknown-model message names every
// shape flag; train --gpu says how to give a run a card's memory on this machine.
TEST(CliShapes, AMisspelledNameGetsTheNearestOnes) {
  expect_input_error("estimate --model lama3-8b", "unknown model 'lama3-8b'; did you mean llama3-8b?");
  expect_input_error("estimate --model llama-3-8b", "; did you mean llama3-8b?");
  expect_input_error("estimate --model gpt5", "--layers --heads --dim, and --arch --seq --vocab --kv-heads --ffn-dim");
  expect_input_error("estimate --gpu h100", "not 'h100'; did you mean h100-80gb?");
  expect_input_error("estimate --gpu RTX4090", "did you mean rtx4090-24gb?");
  expect_input_error("train --gpu rtx4090-24gb", "--gpu is for estimate, plan and max-batch: train runs on this machine's device. To train within rtx4090-24gb's memory here, give --device-memory 25220349952B (its usable 23.49 GiB)");
  const CliRun help = trainmem("train --help");
  EXPECT_EQ(help.out.find("--gpu"), std::string::npos) << "train's --help lists no flag train refuses";
}

// Item 4: max-batch on a machine without a GPU ran real steps for hours, printing nothing
// (gpt2-124m on 24 GiB). Now the meta runs answer first, the trials' time is said, and trials
// expected to pass --trial-minutes are not run: it answers in seconds, pointing at estimate.
// The limit is 3 s, not the default 10 min: how long the trials take depends on the CPU (7 min on
// one 2-core VM, 47 min on another), and the test must hold on any machine. No CPU does gpt2-124m's
// trials (three batches of about 14 x 1024 tokens, some 10 TFLOP a step) in 3 s; a machine that ran
// them here would hold 23 GiB of host memory (the card's budget) for minutes.
TEST(CliShapes, MaxBatchNeverRunsForHoursUnannounced) {
  TRAINMEM_SKIP_UNDER_SANITIZERS("the CPU's speed is probed; under ASan it is the sanitizer's");
  const std::string question = "max-batch --device cpu --model gpt2-124m --gpu rtx4090-24gb --trial-minutes 0.05";
  const CliRun r = trainmem(question + " --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = parse_json(r.out);
  EXPECT_FALSE(j["trials_run"].get<bool>()) << j.dump();
  EXPECT_GT(j["expected_trial_seconds"].get<double>(), 3) << j.dump();
  EXPECT_EQ(j["max_batch"], j["predicted_max_batch"]);
  EXPECT_NE(r.err.find("the estimator (meta runs) says:"), std::string::npos) << r.err;
  const CliRun text = trainmem(question);
  EXPECT_NE(text.out.find("the real runs were not made"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("trainmem estimate"), std::string::npos) << text.out;
}

// Item 5: on a GPU the default attention is what PyTorch users get (SDPA's flash kernel), said in
// the setup line; the CPU keeps naive; where the GPU flash kernels cannot run, naive and why.
TEST(CliShapes, TheGpuDefaultAttentionIsPyTorchsFlash) {
  const CliRun gpu = trainmem("estimate --model llama3-8b --gpu h100-80gb --precision bf16 --seq 4096 --batch 1");
  ASSERT_EQ(gpu.exit_code, 0) << gpu.err;
  EXPECT_NE(gpu.out.find("attention=flash (the GPU default, as PyTorch's SDPA)"), std::string::npos) << gpu.out;
  const CliRun fp32 = trainmem("estimate --model gpt2-124m --gpu h100-80gb --batch 1");
  EXPECT_NE(fp32.out.find("attention=naive (the GPU default here: trainmem's flash runs in bf16/fp16 on a GPU)"),
            std::string::npos) << fp32.out;
  const CliRun cpu = trainmem("estimate --device cpu --model gpt2-124m --precision bf16 --batch 1 --json");
  ASSERT_EQ(cpu.exit_code, 0) << cpu.err;
  EXPECT_EQ(parse_json(cpu.out)["config"]["attention"], "naive");
  const CliRun chosen = trainmem("estimate --model llama3-8b --gpu h100-80gb --precision bf16 --attention naive --batch 1");
  EXPECT_NE(chosen.out.find("attention=naive,"), std::string::npos) << chosen.out;
}

// Item 6: advice that cannot close the gap: the expandable-segments line for 155 MiB of
// fragmentation when 20 GiB are missing (the live tensors alone exceed the card).
TEST(CliShapes, AdviceThatCannotCloseTheGapIsLeftOut) {
  const CliRun r = trainmem("estimate --model gpt2-1.5b --gpu rtx4090-24gb --precision bf16 --attention naive");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("fits: NO"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("expandable segments"), std::string::npos) << r.out;
}

// Item 15: --lr 1e30 skipped 1,000 steps (loss nan) and exited 0. The run stops after
// kMaxSkippedStepsAtOneScale skipped steps in a row at a scale that does not fall, naming the cause.
TEST(CliShapes, ARunWhoseEveryStepIsSkippedStops) {
  for (const char* flags : {"--lr 1e30", "--weight-decay 3e38"}) {
    SCOPED_TRACE(flags);
    const CliRun r = trainmem(std::string("train --device cpu --model tiny --steps 1000 ") + flags);
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_NE(r.err.find("were all skipped"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("smaller --lr"), std::string::npos) << r.err;
    EXPECT_EQ(r.out.find("step 1000/1000"), std::string::npos) << r.out;
  }
}

// Item 17: estimate != train by 18-80 KB when fp16 overflow skipped the first steps (Adam's
// moments came a step later). Over overflowing fp16 setups, estimate equals train to the byte.
TEST(CliShapes, AnEstimateEqualsARunWhoseFirstStepsOverflow) {
  for (const char* setup : {"--model small --seq 2 --batch 2 --precision fp16",
                            "--model tiny-hd64 --seq 1 --vocab 123 --batch 1 --precision fp16",
                            "--model tiny --precision fp16 --loss-scale 1e19"}) {
    SCOPED_TRACE(setup);
    const std::string json = temp_path("overflow_run.json");
    const CliRun run = trainmem(std::string("train --device cpu --steps 2 --json ") + json + " " + setup);
    ASSERT_EQ(run.exit_code, 0) << run.err;
    const nlohmann::json trained = nlohmann::json::parse(read_text_file(json));
    std::remove(json.c_str());
    EXPECT_TRUE(trained["steps"][0]["skipped"].get<bool>()) << "no longer a case whose first step overflows";
    const CliRun e = trainmem(std::string("estimate --device cpu --json ") + setup);
    ASSERT_EQ(e.exit_code, 0) << e.err;
    const nlohmann::json estimate = parse_json(e.out);
    EXPECT_EQ(estimate["peak_allocated_bytes"], trained["memory"]["peak_allocated_bytes"]);
    EXPECT_EQ(estimate["peak_reserved_bytes"], trained["memory"]["peak_reserved_bytes"]);
  }
}

// Item 20: the lazy loader's flags without --loader lazy were accepted and ignored.
TEST(CliShapes, TheLazyLoadersFlagsNeedTheLazyLoader) {
  expect_input_error("train --prefetch 3", "--prefetch is the lazy loader's: add --loader lazy, or drop --prefetch");
  expect_input_error("train --device cpu --pinned on", "--pinned is the lazy loader's");
  expect_input_error("estimate --loader eager --prefetch 1", "(--loader eager has no --prefetch)");
  const CliRun lazy = trainmem("estimate --device cpu --loader lazy --prefetch 3 --pinned off");
  EXPECT_EQ(lazy.exit_code, 0) << lazy.err;
}

}  // namespace
}  // namespace trainmem
