// `trainmem train` under mpirun with a command line per rank (`mpirun -np 1 A : -np 1 B`): ranks
// started with different flags stop at once, every rank with a line naming the first flag that
// differs and both values, exit code 2 (rank_agreement.h). Before that check, --steps 3 against
// --steps 6 hung in a collective, and --layers 3 on one rank overflowed a buffer in
// reduce_scatter. Every run is bounded by `timeout`: a hang fails the test (124), it cannot hang it.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <string>

#include "common/tests/command_runner.h"

namespace trainmem {
namespace {

using testing_support::CommandResult;

struct TimedResult : CommandResult {
  double seconds = 0;
};

// mpirun with one rank running `trainmem <rank0_args>` and one running `trainmem <rank1_args>`.
TimedResult two_ranks(const std::string& rank0_args, const std::string& rank1_args) {
  // OpenMPI refuses to run as root (CI) unless both variables are set.
  std::string command = "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout -k 5 60 '";
  command += TRAINMEM_MPIEXEC;
  command += "' --oversubscribe";
  for (const std::string* args : {&rank0_args, &rank1_args}) {
    command += " -np 1 '";
    command += TRAINMEM_BINARY;
    command += "' ";
    command += *args;
    command += " :";
  }
  command.pop_back();  // the last ':'
  const auto start = std::chrono::steady_clock::now();
  TimedResult r;
  static_cast<CommandResult&>(r) = testing_support::run_command(command);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return r;
}

// Stopped quickly with exit code 2, before training, each rank saying `difference` on its line.
void expect_both_ranks_refused(const TimedResult& r, const std::string& difference) {
  EXPECT_NE(r.exit_code, 124) << "the ranks hung until timeout ended them:\n" << r.err;
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_LT(r.seconds, 30.0);
  const std::string message = "error: the ranks were started with different settings: " + difference +
                              "; start every rank with the same flags\n";
  for (const std::string rank : {"0", "1"})
    EXPECT_NE(r.err.find("trainmem: rank " + rank + " of 2: " + message), std::string::npos)
        << "rank " << rank << " did not say it:\n" << r.err;
  EXPECT_EQ(r.out.find("step "), std::string::npos) << "training started:\n" << r.out;
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

}  // namespace
}  // namespace trainmem
