// `trainmem train --zero/--offload` from the outside: the real binary, once alone and once under
// `mpirun -np 2`, its output, its --json, and its errors for flag mixes that cannot work.
//
// Equality: 2 ranks of B = 2 rows with ZeRO-2 against one process of B = 4 rows without ZeRO,
// fp32, 3 steps: the reported loss (the mean over the ranks) and gradient norm per step agree to
// 1e-5 (relative for the norm) — the same batches, a different summation order.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include <nlohmann/json.hpp>

#include "common/tests/command_runner.h"

namespace trainmem {
namespace {

using testing_support::read_text_file;
using CliRun = testing_support::CommandResult;

std::string temp_path(const std::string& name) { return testing_support::scratch_path("zero_cli_" + name); }
CliRun run(const std::string& prefix, const std::string& args) {
  return testing_support::run_program(prefix, TRAINMEM_BINARY, args);
}

CliRun trainmem(const std::string& args) { return run("", args); }

// mpirun -np N (as root, OpenMPI must be told that it may run).
CliRun trainmem_mpirun(int ranks, const std::string& args) {
  std::string prefix = "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 '";
  prefix.append(TRAINMEM_MPIEXEC).append("' -np ").append(std::to_string(ranks)).append(" --oversubscribe");
  return run(prefix, args);
}

#define SKIP_WITHOUT_MPI()                                                                \
  do {                                                                                    \
    if (!TRAINMEM_CLI_TEST_MPI) GTEST_SKIP() << "trainmem was built without MPI: no mpirun test"; \
  } while (0)

std::size_t count(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (std::size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

TEST(ZeroCli, TwoRanksWithZero2MatchOneProcessWithTheWholeBatch) {
  SKIP_WITHOUT_MPI();
  const std::string single_json = temp_path("single.json"), sharded_json = temp_path("sharded.json");
  const CliRun single = trainmem("train --device cpu --model tiny --steps 3 --batch 4 --json '" + single_json + "'");
  ASSERT_EQ(single.exit_code, 0) << single.err;
  const CliRun sharded =
      trainmem_mpirun(2, "train --device cpu --model tiny --steps 3 --batch 2 --zero 2 --json '" + sharded_json + "'");
  ASSERT_EQ(sharded.exit_code, 0) << sharded.out << sharded.err;

  // Only rank 0 reports: one line per step, one "world:" line.
  EXPECT_EQ(count(sharded.out, "step    1/3"), 1u) << sharded.out;
  EXPECT_EQ(count(sharded.out, "zero=2 N=2"), 3u) << sharded.out;
  EXPECT_EQ(count(sharded.err, "world: 2 ranks (mpi), ZeRO-2"), 1u) << sharded.err;

  const auto a = nlohmann::json::parse(read_text_file(single_json));
  const auto b = nlohmann::json::parse(read_text_file(sharded_json));
  EXPECT_EQ(b["config"]["world_size"], 2);
  EXPECT_EQ(b["config"]["zero"], 2);
  EXPECT_EQ(b["config"]["offload"], "none");
  EXPECT_EQ(b["world"]["world_size"], 2);
  EXPECT_EQ(b["world"]["backend"], "mpi");
  EXPECT_EQ(b["world"]["global_batch"], 4);
  EXPECT_EQ(a["config"]["zero"], -1);
  ASSERT_EQ(a["steps"].size(), 3u);
  ASSERT_EQ(b["steps"].size(), 3u);
  for (std::size_t i = 0; i < 3; ++i) {
    EXPECT_NEAR(b["steps"][i]["loss"].get<double>(), a["steps"][i]["loss"].get<double>(), 1e-5) << "step " << i + 1;
    const double na = a["steps"][i]["grad_norm"].get<double>(), nb = b["steps"][i]["grad_norm"].get<double>();
    EXPECT_NEAR(nb, na, 1e-5 * na) << "step " << i + 1;
  }
  // Per-rank memory and communication: measured = this implementation's exact formula.
  const auto& zero = b["zero"];
  EXPECT_EQ(zero["stage"], 2);
  for (const char* key :
       {"parameters", "gradients", "optimizer_state", "parameters_peak", "gradients_peak", "communication_peak", "host"})
    EXPECT_EQ(zero["per_rank_bytes"][key], zero["predicted_per_rank_bytes"][key]) << key;
  EXPECT_GT(zero["per_rank_bytes"]["gradients"].get<double>(), 0);
  EXPECT_EQ(zero["comm_per_step"]["volume_bytes"].get<double>(),
            zero["comm_per_step"]["predicted_volume_bytes"].get<double>());
  std::remove(single_json.c_str());
  std::remove(sharded_json.c_str());
}

// fp16 with a loss scale of 2^16: the ranks' gradients must be summed as shares of the global
// mean (each rank's loss times 1/N), not as N means divided afterwards, or the sum overflows fp16
// where the single process does not and the step is skipped.
TEST(ZeroCli, Fp16OverTwoRanksSkipsTheStepsOneProcessSkips) {
  SKIP_WITHOUT_MPI();
  const std::string single_json = temp_path("fp16_single.json"), sharded_json = temp_path("fp16_sharded.json");
  const CliRun single =
      trainmem("train --device cpu --model tiny --steps 3 --batch 4 --precision fp16 --json '" + single_json + "'");
  ASSERT_EQ(single.exit_code, 0) << single.err;
  const CliRun sharded = trainmem_mpirun(
      2, "train --device cpu --model tiny --steps 3 --batch 2 --precision fp16 --zero 1 --json '" + sharded_json + "'");
  ASSERT_EQ(sharded.exit_code, 0) << sharded.out << sharded.err;
  const auto a = nlohmann::json::parse(read_text_file(single_json));
  const auto b = nlohmann::json::parse(read_text_file(sharded_json));
  for (std::size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(b["steps"][i]["skipped"], a["steps"][i]["skipped"]) << "step " << i + 1;
    EXPECT_EQ(b["steps"][i]["loss_scale"], a["steps"][i]["loss_scale"]) << "step " << i + 1;
    EXPECT_NEAR(b["steps"][i]["loss"].get<double>(), a["steps"][i]["loss"].get<double>(), 1e-3) << "step " << i + 1;
  }
  std::remove(single_json.c_str());
  std::remove(sharded_json.c_str());
}

TEST(ZeroCli, OffloadWithoutZeroIsRefused) {
  const CliRun r = trainmem("train --device cpu --model tiny --steps 1 --offload optimizer");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("trainmem: error: --offload optimizer needs --zero 1, 2 or 3"), std::string::npos) << r.err;
}

TEST(ZeroCli, OffloadParamsNeedsStage3) {
  const CliRun r = trainmem("train --device cpu --model tiny --steps 1 --zero 2 --offload params");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--offload params needs --zero 3"), std::string::npos) << r.err;
}

TEST(ZeroCli, Stage3RefusesSqrtRecompute) {
  const CliRun r = trainmem("train --device cpu --model tiny --steps 1 --zero 3 --recompute sqrt");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--recompute sqrt"), std::string::npos) << r.err;
}

TEST(ZeroCli, AStageAloneRunsAsAWorldOfOne) {
  const CliRun r = trainmem("train --device cpu --model tiny --steps 2 --zero 3 --offload optimizer --precision bf16");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("world: 1 rank (local), ZeRO-3"), std::string::npos) << r.err;
  EXPECT_EQ(count(r.out, "zero=3 offload=optimizer N=1"), 2u) << r.out;
}

// The eager and lazy loaders are rank-aware (shuffle_order.h): 2 ranks of 2 rows with ZeRO-2 see
// the shuffled batches one process of 4 rows sees, so the losses agree as with --loader sequential.
TEST(ZeroCli, TwoRanksWithTheEagerOrLazyLoaderMatchOneProcess) {
  SKIP_WITHOUT_MPI();
  for (const std::string loader : {"eager", "lazy"}) {
    const std::string single_json = temp_path(loader + "_single.json"), sharded_json = temp_path(loader + "_sharded.json");
    const std::string common = "train --device cpu --model tiny --steps 3 --loader " + loader;
    const CliRun single = trainmem(common + " --batch 4 --json '" + single_json + "'");
    ASSERT_EQ(single.exit_code, 0) << single.err;
    const CliRun sharded = trainmem_mpirun(2, common + " --batch 2 --zero 2 --json '" + sharded_json + "'");
    ASSERT_EQ(sharded.exit_code, 0) << sharded.out << sharded.err;
    const auto a = nlohmann::json::parse(read_text_file(single_json));
    const auto b = nlohmann::json::parse(read_text_file(sharded_json));
    ASSERT_EQ(a["steps"].size(), 3u);
    ASSERT_EQ(b["steps"].size(), 3u);
    for (std::size_t i = 0; i < 3; ++i)
      EXPECT_NEAR(b["steps"][i]["loss"].get<double>(), a["steps"][i]["loss"].get<double>(), 1e-5)
          << loader << ", step " << i + 1;
    std::remove(single_json.c_str());
    std::remove(sharded_json.c_str());
  }
}

}  // namespace
}  // namespace trainmem
