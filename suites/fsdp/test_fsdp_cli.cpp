// `trainmem train --fsdp ...` from the outside: under `mpirun -np 2` only rank 0 prints a progress
// line per step and writes the JSON, whose `fsdp` section has the measured per-rank peaks equal to
// the formula's; bad FSDP flags and --fsdp with --zero are one-line input errors (exit 2).
#include <gtest/gtest.h>

#include <string>

#include <nlohmann/json.hpp>

#include "common/tests/command_runner.h"

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

TEST(FsdpCli, FullShardOnTwoRanksPrintsOnceAndItsPeaksEqualTheFormula) {
  if (std::string(TRAINMEM_MPIEXEC).empty()) GTEST_SKIP() << "built without MPI: no mpirun to start 2 ranks";
  const std::string json_path = temp_path("run.json");
  const CliResult r = run(mpirun(2), "train --device cpu --model tiny --steps 3 --batch 2 --fsdp full --fsdp-unit layer "
                                     "--fsdp-prefetch on --json '" + json_path + "'");
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  EXPECT_EQ(count_lines(r.out), 3) << r.out;  // rank 0 only: one line per step
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
  for (const Case& c : {Case{"--fsdp full --zero 1", "--fsdp"}, Case{"--fsdp half", "--fsdp must be full, grad_op or none"},
                        Case{"--fsdp full --fsdp-unit 0-layers", "'layer' or 'K-layers'"},
                        Case{"--fsdp full --fsdp-prefetch yes", "--fsdp-prefetch must be on or off"}}) {
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
