// `trainmem train --fsdp ...` from the outside: under `mpirun -np 2` only rank 0 prints a progress
// line per step and writes the JSON, whose `fsdp` section has the measured per-rank peaks equal to
// the formula's; in fp16 with dynamic loss scaling, FSDP on N ranks skips exactly the steps that
// one process with the whole batch skips; bad FSDP flags and --fsdp with --zero are one-line input
// errors (exit 2).
#include <gtest/gtest.h>

#include <string>

#include <nlohmann/json.hpp>

#include "common/model/precision.h"
#include "common/tests/command_runner.h"
#include "common/tests/data_parallel_tolerance.h"

namespace trainmem {
namespace {

using testing_support::count_lines;
using testing_support::read_text_file;
using CliResult = testing_support::CommandResult;

std::string temp_path(const std::string& name) { return testing_support::scratch_path("fsdp_cli_" + name); }
CliResult run(const std::string& prefix, const std::string& args) {
  return testing_support::run_program(prefix, TRAINMEM_BINARY, args);
}

std::string mpirun(int ranks) {
  // As root (CI), OpenMPI runs only when told to; --oversubscribe: more ranks than cores.
  std::string prefix = "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 '";
  prefix.append(TRAINMEM_MPIEXEC).append("' -np ").append(std::to_string(ranks)).append(" --oversubscribe");
  return prefix;
}

// The steps of a run, from --json: (loss, skipped) per step.
nlohmann::json trained_steps(const std::string& prefix, const std::string& args) {
  const std::string json_path = temp_path("steps.json");
  const CliResult r = run(prefix, args + " --json '" + json_path + "'");
  EXPECT_EQ(r.exit_code, 0) << args << "\n" << r.err << r.out;
  if (r.exit_code != 0) return nlohmann::json::array();
  const nlohmann::json steps = nlohmann::json::parse(read_text_file(json_path))["steps"];
  std::remove(json_path.c_str());
  return steps;
}

// fp16 with the dynamic loss scaler (initial scale 2^16): the gradients each rank holds are its
// share of the global mean, as ZeRO's are (FsdpStrategy::loss_scale is 1/N), so they overflow
// exactly when one process's gradients of the whole batch overflow. (Before, FSDP summed the
// ranks' means and divided afterwards: N times larger fp16 gradients, and a skipped first step
// that one process did not skip.) Losses: within what 16-bit logits let two runs of the same
// training differ by (common/tests/data_parallel_tolerance.h, sixteen_bit_loss_tolerance: one
// fp16 place of the largest logit, twice). The tiny model's logits stay below 4 in these steps:
// a logit is the final LayerNorm's output (norm at most sqrt(C) = 8 with its weight 1 and bias 0
// at the start) times a row of wte (64 values drawn with std 0.02: norm about 0.16, at most about
// 0.20 over 256 rows), and an AdamW step moves a weight by about lr at most (Kingma and Ba, 2.1:
// 1 - beta1 = 0.1 <= sqrt(1 - beta2) = 0.22), so four steps by 0.004 and a row of 64 by 0.032: by
// Cauchy-Schwarz |z| <= (8 * 1.004 + 0.032) * (0.20 + 0.032) < 1.9, below 4 with room. So the
// losses agree within 2 * 2^2 * 2^-11 = 3.9e-3.
TEST(FsdpCli, Fp16SkipsTheStepsOneProcessWithTheWholeBatchSkips) {
  if (std::string(TRAINMEM_MPIEXEC).empty()) GTEST_SKIP() << "built without MPI: no mpirun to start ranks";
  const std::string common = "train --device cpu --model tiny --steps 4 --precision fp16 ";
  const nlohmann::json whole = trained_steps("", common + "--batch 4");
  ASSERT_EQ(whole.size(), 4u);
  for (int ranks : {2, 4}) {
    const std::string batch = "--batch " + std::to_string(4 / ranks);
    for (const std::string sharding : {"--fsdp full", "--fsdp grad_op", "--zero 3"}) {
      SCOPED_TRACE(std::to_string(ranks) + " ranks, " + sharding);
      const nlohmann::json sharded = trained_steps(mpirun(ranks), common + batch + " " + sharding);
      ASSERT_EQ(sharded.size(), whole.size());
      for (std::size_t i = 0; i < whole.size(); ++i) {
        EXPECT_EQ(sharded[i]["skipped"], whole[i]["skipped"]) << "step " << i + 1;
        EXPECT_EQ(sharded[i]["loss_scale"], whole[i]["loss_scale"]) << "step " << i + 1;
        EXPECT_NEAR(sharded[i]["loss"].get<double>(), whole[i]["loss"].get<double>(),
                    testing_support::sixteen_bit_loss_tolerance(Precision::fp16, /*max_abs_logit=*/4.0))
            << "step " << i + 1;
      }
    }
  }
}

TEST(FsdpCli, FullShardOnTwoRanksPrintsOnceAndItsPeaksEqualTheFormula) {
  if (std::string(TRAINMEM_MPIEXEC).empty()) GTEST_SKIP() << "built without MPI: no mpirun to start 2 ranks";
  const std::string json_path = temp_path("run.json");
  const CliResult r = run(mpirun(2), "train --device cpu --model tiny --steps 3 --batch 2 --fsdp full --fsdp-unit layer "
                                     "--fsdp-prefetch on --json '" + json_path + "'");
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  EXPECT_EQ(count_lines(r.out), 4) << r.out;  // rank 0 only: one line per step, then the run's summary
  EXPECT_NE(r.out.find("done: 3 steps"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("step    3/3"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("fsdp=full"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("N=2"), std::string::npos) << r.out;

  const nlohmann::json j = nlohmann::json::parse(read_text_file(json_path));
  std::remove(json_path.c_str());
  EXPECT_EQ(j["config"]["fsdp"]["mode"], "full");
  EXPECT_EQ(j["config"]["fsdp"]["unit"], "layer");
  EXPECT_EQ(j["config"]["fsdp"]["prefetch"], true);
  EXPECT_EQ(j["config"]["world_size"], 2);
  const nlohmann::json& f = j["fsdp"];
  for (const char* category : {"parameters", "gradients", "optimizer_state"}) {
    EXPECT_GT(f["per_rank_peak_bytes"][category].get<long long>(), 0) << category;
    EXPECT_EQ(f["per_rank_peak_bytes"][category], f["predicted_per_rank_peak_bytes"][category]) << category;
  }
  EXPECT_EQ(f["layer_units_gathered_at_peak"], 2);
  EXPECT_EQ(f["comm_per_step"]["volume_bytes"], f["comm_per_step"]["predicted_volume_bytes"]);
  EXPECT_EQ(j["steps"].size(), 3u);
}

TEST(FsdpCli, BadFsdpFlagsAreOneLineErrors) {
  struct Case {
    std::string args, expected;
  };
  for (const Case& c : {Case{"--fsdp full --zero 1", "--fsdp"},
                        Case{"--fsdp half", "--fsdp takes one of full, grad_op, none, not 'half'"},
                        Case{"--fsdp full --fsdp-unit 0-layers", "'layer' or 'K-layers'"},
                        Case{"--fsdp full --fsdp-prefetch yes", "--fsdp-prefetch takes one of on, off, not 'yes'"}}) {
    SCOPED_TRACE(c.args);
    const CliResult r = run("", "train --device cpu --model tiny --steps 1 " + c.args);
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_EQ(count_lines(r.err), 1) << r.err;
    EXPECT_EQ(r.err.rfind("trainmem: error: ", 0), 0u) << r.err;
    EXPECT_NE(r.err.find(c.expected), std::string::npos) << r.err;
    EXPECT_TRUE(r.out.empty()) << r.out;
  }
}

}  // namespace
}  // namespace trainmem
