// Result files from the outside (common/util/output_file.h): trainmem and the benchmarks write a
// file whole or not at all, refuse a path that cannot be written before any work, and fail when
// standard output cannot be written. The faults (a full disk, an I/O error, SIGTERM in the middle
// of the write) come from a shim preloaded into the program (common/tests/write_fault_shim.cpp).
#include <gtest/gtest.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/tests/command_runner.h"

namespace trainmem {
namespace {

namespace fs = std::filesystem;
using testing_support::CommandResult;
using testing_support::count_lines;
using testing_support::read_text_file;
using testing_support::run_program;

constexpr const char* kEarlier = "the earlier result, which must survive byte for byte\n";

CommandResult trainmem(const std::string& args) { return run_program("", TRAINMEM_BINARY, args); }

std::string last_line(const std::string& text) {
  const std::string trimmed = text.substr(0, text.find_last_not_of('\n') + 1);
  return trimmed.substr(trimmed.find_last_of('\n') + 1);
}

// The error lines ("...: error: ...") of a program's stderr.
int error_lines(const std::string& err) {
  int n = 0;
  for (std::size_t at = err.find("error: "); at != std::string::npos; at = err.find("error: ", at + 1)) ++n;
  return n;
}

// A failed run: exit 1, and the one error line is the last line of stderr and says `expected`.
void expect_run_error(const CommandResult& r, const std::string& expected) {
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_EQ(error_lines(r.err), 1) << r.err;
  EXPECT_EQ(last_line(r.err), expected) << r.err;
}

// An input error: exit 2 before any work (nothing on stdout, only the error on stderr).
void expect_refused(const CommandResult& r, const std::string& expected) {
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_EQ(count_lines(r.err), 1) << r.err;
  EXPECT_EQ(last_line(r.err), expected) << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
}

// Why the shim cannot be preloaded into this build ("" if it can): GCC's AddressSanitizer runtime
// must come first in the list of libraries and refuses to start behind it.
std::string shim_unusable() {
  const CommandResult r = run_program("LD_PRELOAD='" TRAINMEM_WRITE_FAULT_SHIM "'", TRAINMEM_BINARY, "--help");
  return r.exit_code == 0 ? "" : "exit code " + std::to_string(r.exit_code) + ": " + r.err.substr(0, r.err.find('\n'));
}

// One folder per test holding the result file; the faults hit only the files in it.
class ResultFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    // Normalized: the shim matches the path as the kernel spells it ("/tmp//x" is "/tmp/x").
    dir_ = fs::path(testing_support::scratch_path("result_files")).lexically_normal().string();
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string file(const std::string& name) const { return dir_ + "/" + name; }
  std::vector<std::string> folder_entries() const {
    std::vector<std::string> names;
    for (const auto& entry : fs::directory_iterator(dir_)) names.push_back(entry.path().filename().string());
    return names;
  }
  // The environment that makes writes to this folder's files fail (`fault`: ENOSPC, EIO, SIGTERM)
  // once `after` bytes went through.
  std::string faults(const std::string& fault, long after) const {
    return "WRITE_FAULT=" + fault + " WRITE_FAULT_PATH='" + dir_ + "/' WRITE_FAULT_AFTER=" + std::to_string(after) +
           " LD_PRELOAD='" TRAINMEM_WRITE_FAULT_SHIM "'";
  }
  void write_earlier(const std::string& name) const { std::ofstream(file(name), std::ios::binary) << kEarlier; }

  std::string dir_;
};

const std::string kTrain = "train --device cpu --model tiny --steps 1 --batch 2";

// --- paths refused before any work

TEST_F(ResultFiles, APathThatCannotBeWrittenIsRefusedBeforeTheModelIsBuilt) {
  for (const char* flag : {"--json", "--record-memory", "--memory-snapshot"}) {
    SCOPED_TRACE(flag);
    expect_refused(trainmem(kTrain + " " + flag + " /nonexistent/dir/out.json"),
                   std::string("trainmem: error: ") + flag + " /nonexistent/dir/out.json: the folder /nonexistent/dir does not exist");
  }
  expect_refused(trainmem(kTrain + " --json " + dir_), "trainmem: error: --json " + dir_ + ": is a folder; give a file name");
  expect_refused(trainmem("replay " TRAINMEM_CLI_TEST_DATA_DIR "/small_trace.json --record /nonexistent/dir/trace.json"),
                 "trainmem: error: --record /nonexistent/dir/trace.json: the folder /nonexistent/dir does not exist");
}

// --- write errors are errors

TEST_F(ResultFiles, AJsonFileThatCannotBeWrittenIsAnError) {
  expect_run_error(trainmem(kTrain + " --json /dev/full"), "trainmem: error: cannot write --json /dev/full: No space left on device");
}

TEST_F(ResultFiles, StandardOutputThatCannotBeWrittenIsAnError) {
  expect_run_error(trainmem("estimate --json > /dev/full"),
                   "trainmem: error: cannot write to standard output: No space left on device");
  expect_run_error(trainmem("info --device cpu > /dev/full"),
                   "trainmem: error: cannot write to standard output: No space left on device");
  expect_run_error(trainmem("estimate --json >&-"), "trainmem: error: cannot write to standard output: Bad file descriptor");
  // The run's result file is still written, whole; the lost progress lines make it fail.
  const CommandResult r = trainmem(kTrain + " --json " + file("run.json") + " >&-");
  expect_run_error(r, "trainmem: error: cannot write to standard output: Bad file descriptor");
  EXPECT_TRUE(nlohmann::json::accept(read_text_file(file("run.json"))));
}

// --- the earlier file survives a failed or interrupted write

TEST_F(ResultFiles, AFullDiskOrAnIoErrorKeepsTheEarlierFileByteForByte) {
  if (const std::string why = shim_unusable(); !why.empty()) GTEST_SKIP() << "cannot preload the write fault shim: " << why;
  for (const auto& [fault, reason] : {std::pair{"ENOSPC", "No space left on device"}, std::pair{"EIO", "Input/output error"}}) {
    SCOPED_TRACE(fault);
    write_earlier("run.json");
    const CommandResult r = run_program(faults(fault, 100), TRAINMEM_BINARY, kTrain + " --json " + file("run.json"));
    expect_run_error(r, "trainmem: error: cannot write --json " + file("run.json") + ": " + reason + "; the earlier file is kept");
    EXPECT_EQ(read_text_file(file("run.json")), kEarlier);
    EXPECT_EQ(folder_entries(), std::vector<std::string>{"run.json"});  // no temporary file left
  }
}

TEST_F(ResultFiles, SigtermDuringTheWriteKeepsTheEarlierFileAndLeavesNoTemporaryFile) {
  if (const std::string why = shim_unusable(); !why.empty()) GTEST_SKIP() << "cannot preload the write fault shim: " << why;
  write_earlier("run.json");
  const CommandResult r = run_program(faults("SIGTERM", 100), TRAINMEM_BINARY, kTrain + " --json " + file("run.json"));
  // Killed by the signal: run_command says -1, or the shell that ran it 128 + 15.
  EXPECT_TRUE(r.exit_code == -1 || r.exit_code == 128 + SIGTERM) << "exit code " << r.exit_code << "\n" << r.err;
  EXPECT_EQ(read_text_file(file("run.json")), kEarlier);
  EXPECT_EQ(folder_entries(), std::vector<std::string>{"run.json"});
}

// --- the benchmarks' --benchmark_out (Google Benchmark opens it itself)

const std::string kBench = "--device=cpu --benchmark_filter=BM_TrainStep/tiny --benchmark_min_time=0.01";

TEST_F(ResultFiles, BenchmarkOutIsCheckedBeforeTheBenchmarksRun) {
  const CommandResult r = run_program("", TRAINMEM_BENCH_BASELINE, kBench + " --benchmark_out=/nonexistent/dir/b.json");
  expect_refused(r, "bench_baseline: error: --benchmark_out /nonexistent/dir/b.json: the folder /nonexistent/dir does not exist");
}

TEST_F(ResultFiles, BenchmarkOutReplacesTheEarlierFileWhole) {
  write_earlier("bench.json");
  const CommandResult r = run_program("", TRAINMEM_BENCH_BASELINE, kBench + " --benchmark_out=" + file("bench.json"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(read_text_file(file("bench.json")));
  EXPECT_EQ(j["benchmarks"].size(), 1u) << j.dump(2);
  EXPECT_EQ(folder_entries(), std::vector<std::string>{"bench.json"});
}

TEST_F(ResultFiles, BenchmarkOutOnAFullDiskKeepsTheEarlierFile) {
  if (const std::string why = shim_unusable(); !why.empty()) GTEST_SKIP() << "cannot preload the write fault shim: " << why;
  write_earlier("bench.json");
  const CommandResult r =
      run_program(faults("ENOSPC", 100), TRAINMEM_BENCH_BASELINE, kBench + " --benchmark_out=" + file("bench.json"));
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_EQ(error_lines(r.err), 1) << r.err;
  EXPECT_EQ(last_line(r.err).rfind("bench_baseline: error: cannot write --benchmark_out " + file("bench.json") + ": ", 0), 0u)
      << r.err;
  EXPECT_NE(last_line(r.err).find("; the earlier file is kept"), std::string::npos) << r.err;
  EXPECT_EQ(read_text_file(file("bench.json")), kEarlier);
  EXPECT_EQ(folder_entries(), std::vector<std::string>{"bench.json"});
}

}  // namespace
}  // namespace trainmem
