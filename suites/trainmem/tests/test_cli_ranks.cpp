// `trainmem train`, `plan` and `estimate` under mpirun with a command line (or an environment) per
// rank (`mpirun -np 1 A : -np 1 B`): ranks started with different flags stop at once, every rank
// with a line naming the first flag that differs and both values, exit code 2 (rank_agreement.h).
// Before that check, train's --steps 3 against --steps 6 hung in a collective, and --layers 3 on
// one rank overflowed a buffer in reduce_scatter; estimate answered for rank 0's flags and exited
// 0. And the ranks of `plan --device cpu` measure the machine together or not at all, whatever
// cache each finds (before: rank 1 calibrated alone, waiting for rank 0 in a collective forever).
// Every run is bounded by `timeout`: a hang fails the test (124), it cannot hang it.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>
#include <utility>

#include "common/tests/command_runner.h"
#include "suites/trainmem/planner/calibration.h"
#include "suites/trainmem/tests/synthetic_calibration.h"

namespace trainmem {
namespace {

using testing_support::CommandResult;

struct TimedResult : CommandResult {
  double seconds = 0;
};

// mpirun with one rank running `env RANK0_ENV trainmem RANK0_ARGS` and one running `env RANK1_ENV
// trainmem RANK1_ARGS`.
TimedResult two_ranks(const std::string& rank0_env, const std::string& rank0_args, const std::string& rank1_env,
                      const std::string& rank1_args) {
  // OpenMPI refuses to run as root (CI) unless both variables are set.
  std::string command = "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout -k 5 60 '";
  command += TRAINMEM_MPIEXEC;
  command += "' --oversubscribe";
  for (const auto& [env, args] : {std::pair{&rank0_env, &rank0_args}, std::pair{&rank1_env, &rank1_args}})
    command += " -np 1 env " + *env + " '" + TRAINMEM_BINARY + "' " + *args + " :";
  command.pop_back();  // the last ':'
  const auto start = std::chrono::steady_clock::now();
  TimedResult r;
  static_cast<CommandResult&>(r) = testing_support::run_command(command);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return r;
}
TimedResult two_ranks(const std::string& rank0_args, const std::string& rank1_args) {
  return two_ranks("", rank0_args, "", rank1_args);
}

// Stopped quickly with exit code 2, before any work (nothing on stdout), each rank saying
// `difference` on its line.
void expect_both_ranks_refused(const TimedResult& r, const std::string& difference) {
  EXPECT_NE(r.exit_code, 124) << "the ranks hung until timeout ended them:\n" << r.err;
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_LT(r.seconds, 30.0);
  const std::string message = "error: the ranks were started with different settings: " + difference +
                              "; start every rank with the same flags\n";
  for (const std::string rank : {"0", "1"})
    EXPECT_NE(r.err.find("trainmem: rank " + rank + " of 2: " + message), std::string::npos)
        << "rank " << rank << " did not say it:\n" << r.err;
  EXPECT_EQ(r.out, "") << "an answer was printed:\n" << r.out;
}

TEST(CliRanks, DifferentStepsStopEveryRankNamingSteps) {
  expect_both_ranks_refused(two_ranks("train --device cpu --model tiny --zero 2 --steps 3",
                                      "train --device cpu --model tiny --zero 2 --steps 6"),
                            "--steps is 3 on rank 0 but 6 on rank 1");
}

// The flag given on one rank only: the other rank's value is the default.
TEST(CliRanks, LayersOnOneRankOnlyStopEveryRankNamingLayers) {
  expect_both_ranks_refused(
      two_ranks("train --device cpu --model tiny --zero 2 --steps 3",
                "train --device cpu --model tiny --zero 2 --steps 3 --layers 3"),
      "--layers is (default) on rank 0 but 3 on rank 1");
}

// The control: the same flags train as before; output paths may differ (here: only rank 0 has --json).
TEST(CliRanks, SameFlagsTrainAndOutputPathsMayDiffer) {
  const std::string json = testing_support::scratch_path("cli_ranks.json");
  const TimedResult r =
      two_ranks("train --device cpu --model tiny --zero 2 --steps 3 --json '" + json + "'",
                "train --device cpu --model tiny --zero 2 --steps 3");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("step    3/3"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("world: 2 ranks (mpi), ZeRO-2"), std::string::npos) << r.err;
  EXPECT_NE(testing_support::read_text_file(json).find("\"world_size\": 2"), std::string::npos);
  std::remove(json.c_str());
}

TEST(PlanRanks, DifferentFlagsStopEveryRankNamingTheFlag) {
  expect_both_ranks_refused(two_ranks("plan --gpu h100-80gb --model tiny --global-batch 8",
                                      "plan --gpu h100-80gb --model tiny --global-batch 4"),
                            "--global-batch is 8 on rank 0 but 4 on rank 1");
}

TEST(EstimateRanks, DifferentFlagsStopEveryRankNamingTheFlag) {
  expect_both_ranks_refused(two_ranks("estimate --device cpu --model tiny --zero 2 --batch 2",
                                      "estimate --device cpu --model tiny --zero 2 --batch 4"),
                            "--batch is 2 on rank 0 but 4 on rank 1");
}

// Rank 0 finds the cache, rank 1 (another cache folder) does not: rank 0's cache decides for both,
// so neither measures, and the plan is printed at once.
TEST(PlanRanks, RankZerosCalibrationCacheDecidesForEveryRank) {
  const std::string found = testing_support::scratch_path("plan_ranks_cache");
  const std::string empty = testing_support::scratch_path("plan_ranks_no_cache");
  std::filesystem::create_directories(empty);
  const planner::Calibration cached = planner::fixtures::synthetic_calibration(2);
  ASSERT_EQ(planner::calibration_problem(cached, 2), std::nullopt);
  planner::write_calibration(cached, planner::fixtures::cache_path_in(found, 2));
  const std::string plan = "plan --device cpu --model tiny --global-batch 4 --top 2";
  const TimedResult r = two_ranks("TRAINMEM_CACHE_DIR=" + found, plan, "TRAINMEM_CACHE_DIR=" + empty, plan);
  EXPECT_NE(r.exit_code, 124) << "the ranks hung until timeout ended them:\n" << r.err;
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(r.err.find("calibrating"), std::string::npos) << r.err;
  EXPECT_NE(r.out.find("best: "), std::string::npos) << r.out;
  std::filesystem::remove_all(found);
  std::filesystem::remove_all(empty);
}

}  // namespace
}  // namespace trainmem
