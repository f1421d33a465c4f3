// A rank that fails ends every rank, quickly, with a message naming the rank and the cause:
// mpirun -np 2 on comm_failure_helper, where rank 1 fails while rank 0 waits in an all-reduce.
// Each run is bounded by `timeout`, so this test cannot hang whatever happens.
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace {

struct Outcome {
  int exit_code = -1;
  std::string output;
  double seconds = 0;
};

Outcome run_two_ranks(const std::string& mode) {
  // OpenMPI refuses to run as root (CI) unless both of these are set.
  setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
  setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
  const std::string command = std::string("timeout -k 5 60 ") + TRAINMEM_MPIEXEC + " -np 2 --oversubscribe " +
                              TRAINMEM_COMM_FAILURE_HELPER + " " + mode + " 2>&1";
  const auto start = std::chrono::steady_clock::now();
  Outcome out;
  FILE* pipe = popen(command.c_str(), "r");
  if (!pipe) return out;
  char buffer[4096];
  while (std::fgets(buffer, sizeof buffer, pipe)) out.output += buffer;
  const int status = pclose(pipe);
  out.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return out;
}

// The control: the same two ranks without a failure finish with exit code 0.
TEST(CommFailure, TwoHealthyRanksExitZero) {
  const Outcome out = run_two_ranks("ok");
  EXPECT_EQ(out.exit_code, 0) << out.output;
  EXPECT_NE(out.output.find("rank 0: ok"), std::string::npos) << out.output;
  EXPECT_NE(out.output.find("rank 1: ok"), std::string::npos) << out.output;
}

// 124 would be `timeout` ending a hang; within 20 s means nobody waited for a rank that is gone.
void expect_job_ended_naming_rank_1(const Outcome& out, const std::string& cause) {
  EXPECT_NE(out.exit_code, 0) << out.output;
  EXPECT_NE(out.exit_code, 124) << "the job hung until timeout ended it:\n" << out.output;
  EXPECT_LT(out.seconds, 20.0) << out.output;
  EXPECT_NE(out.output.find("trainmem: rank 1 of 2: " + cause), std::string::npos) << out.output;
  EXPECT_EQ(out.output.find("rank 0: ok"), std::string::npos) << "rank 0 went on alone:\n" << out.output;
}

TEST(CommFailure, AnExceptionOnRank1EndsBothRanksNamingRank1) {
  expect_job_ended_naming_rank_1(run_two_ranks("throw"), "out of memory: tried to allocate 2.00 GiB (simulated)");
}

TEST(CommFailure, AnUncaughtExceptionOnRank1EndsBothRanksNamingRank1) {
  expect_job_ended_naming_rank_1(run_two_ranks("uncaught"),
                                 "uncaught exception: out of memory: tried to allocate 2.00 GiB (simulated)");
}

TEST(CommFailure, AFailureBeforeMpiStartsEndsBothRanksNamingRank1) {
  expect_job_ended_naming_rank_1(run_two_ranks("early"), "bad configuration: --zero 5 (simulated)");
}

}  // namespace
