// Result files written whole or not at all (common/util/output_file.h): paths refused before any
// work, a replaced file keeps its mode, a failed or interrupted write keeps the earlier file and
// leaves no temporary file, devices are written in place with their errors reported.
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "common/tests/error_of.h"
#include "common/util/output_file.h"

namespace trainmem {
namespace {

namespace fs = std::filesystem;

// A fresh folder per test (ctest runs tests in parallel processes).
class OutputFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) / ("trainmem_output_file_" + std::to_string(getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    fs::permissions(dir_, fs::perms::owner_all);
    fs::remove_all(dir_);
  }
  std::string file(const std::string& name) const { return (dir_ / name).string(); }
  std::vector<std::string> folder_entries() const {
    std::vector<std::string> names;
    for (const auto& entry : fs::directory_iterator(dir_)) names.push_back(entry.path().filename().string());
    return names;
  }
  fs::path dir_;
};

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

void write_plain(const std::string& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }

mode_t mode_of(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(::stat(path.c_str(), &st), 0) << path;
  return st.st_mode & 07777;
}

using testing_support::error_of;

TEST_F(OutputFileTest, ANewFileGetsTheModeAShellWouldGiveIt) {
  const mode_t mask = ::umask(022);
  write_output_file(file("new.json"), "{}\n", "--json");
  ::umask(mask);
  EXPECT_EQ(read_file(file("new.json")), "{}\n");
  EXPECT_EQ(mode_of(file("new.json")), 0644u);
  EXPECT_EQ(folder_entries(), std::vector<std::string>{"new.json"});  // no temporary file left
}

TEST_F(OutputFileTest, AReplacedFileGetsTheNewContentsAndKeepsItsMode) {
  write_plain(file("run.json"), "an earlier result, longer than the new one");
  ::chmod(file("run.json").c_str(), 0640);
  write_output_file(file("run.json"), "new", "--json");
  EXPECT_EQ(read_file(file("run.json")), "new");
  EXPECT_EQ(mode_of(file("run.json")), 0640u);
  EXPECT_EQ(folder_entries(), std::vector<std::string>{"run.json"});
}

TEST_F(OutputFileTest, ASymbolicLinkStaysALinkAndTheFileItNamesIsReplaced) {
  write_plain(file("run-42.json"), "old");
  fs::create_symlink("run-42.json", file("latest.json"));
  write_output_file(file("latest.json"), "new", "--json");
  EXPECT_TRUE(fs::is_symlink(file("latest.json")));
  EXPECT_EQ(read_file(file("run-42.json")), "new");
}

TEST_F(OutputFileTest, AWriteThatIsNotCommittedKeepsTheEarlierFileAndLeavesNoTemporaryFile) {
  write_plain(file("run.json"), "the earlier file");
  {
    PendingOutputFile pending(file("run.json"), "--json");
    pending.write("half of a new fi");
    EXPECT_NE(pending.write_path(), file("run.json"));
    EXPECT_TRUE(fs::exists(pending.write_path()));
    // An error found by the caller: the message says the earlier file is kept.
    const std::string message = error_of<OutputFileError>([&] { pending.fail("No space left on device"); });
    EXPECT_EQ(message, "cannot write --json " + file("run.json") + ": No space left on device; the earlier file is kept");
  }  // destroyed without commit(), as when an exception passes
  EXPECT_EQ(read_file(file("run.json")), "the earlier file");
  EXPECT_EQ(folder_entries(), std::vector<std::string>{"run.json"});
}

TEST_F(OutputFileTest, PathsThatCannotBeWrittenAreInputErrorsNamingTheFlag) {
  EXPECT_EQ(error_of<OutputPathError>([] { check_output_path("/nonexistent/dir/out.json", "--json"); }),
            "--json /nonexistent/dir/out.json: the folder /nonexistent/dir does not exist");
  EXPECT_EQ(error_of<OutputPathError>([&] { check_output_path(dir_.string(), "--json"); }),
            "--json " + dir_.string() + ": is a folder; give a file name");
  write_plain(file("plain"), "x");
  EXPECT_EQ(error_of<OutputPathError>([&] { check_output_path(file("plain") + "/out.json", "--json"); }),
            "--json " + file("plain") + "/out.json: " + file("plain") + " is not a folder");
  EXPECT_EQ(error_of<OutputPathError>([&] { check_output_path(file("new.json"), "--json"); }), "no error");
  EXPECT_EQ(error_of<OutputPathError>([] { check_output_path("relative-in-the-working-folder.json", "--json"); }), "no error");
  // An input error is std::invalid_argument (exit 2); a failed write std::runtime_error (exit 1).
  EXPECT_THROW(check_output_path("/nonexistent/dir/out.json", "--json"), std::invalid_argument);
  EXPECT_THROW(write_output_file("/nonexistent/dir/out.json", "x", "--json"), std::runtime_error);
  EXPECT_THROW(write_output_file(dir_.string(), "x", "--json"), OutputFileError);
}

TEST_F(OutputFileTest, AnUnwritableFolderIsRefused) {
  fs::create_directory(file("locked"));
  ::chmod(file("locked").c_str(), 0555);
  const std::string target = file("locked") + "/out.json";
  auto refused = [&] {
    return error_of<OutputPathError>([&] { check_output_path(target, "--json"); }).find("is not writable") != std::string::npos;
  };
  if (geteuid() != 0) {
    EXPECT_TRUE(refused());
    return;
  }
  // Root writes anywhere: the check runs in a child process that has given up root.
  fs::permissions(dir_, fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                            fs::perms::others_read | fs::perms::others_exec);  // it must reach the folder
  const pid_t child = fork();
  if (child == 0) {
    if (setgid(65534) != 0 || setuid(65534) != 0) _exit(77);
    _exit(refused() ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  if (WEXITSTATUS(status) == 77) GTEST_SKIP() << "running as root, and cannot become user 65534 to be refused";
  EXPECT_EQ(WEXITSTATUS(status), 0) << "an unprivileged user was not refused " << target;
}

TEST_F(OutputFileTest, DevicesAreWrittenInPlaceAndTheirErrorsReported) {
  EXPECT_NO_THROW(check_output_path("/dev/full", "--json"));
  EXPECT_EQ(error_of<OutputFileError>([] { write_output_file("/dev/full", "{}\n", "--json"); }),
            "cannot write --json /dev/full: No space left on device");
  EXPECT_NO_THROW(write_output_file("/dev/null", "{}\n", "--json"));
}

TEST_F(OutputFileTest, SigtermDuringTheWriteRemovesTheTemporaryFileAndEndsTheProgram) {
  write_plain(file("run.json"), "the earlier file");
  const pid_t child = fork();
  if (child == 0) {
    PendingOutputFile pending(file("run.json"), "--json");
    pending.write("half of a new fi");
    std::raise(SIGTERM);
    _exit(0);  // not reached: the program ends as SIGTERM asks
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status)) << "exit status " << status;
  EXPECT_EQ(WTERMSIG(status), SIGTERM);
  EXPECT_EQ(read_file(file("run.json")), "the earlier file");
  EXPECT_EQ(folder_entries(), std::vector<std::string>{"run.json"});
}

TEST_F(OutputFileTest, TheHandlersThatWereThereComeBackAfterTheWrite) {
  struct sigaction before {}, after {};
  ::sigaction(SIGTERM, nullptr, &before);
  write_output_file(file("a.json"), "a", "");
  ::sigaction(SIGTERM, nullptr, &after);
  EXPECT_EQ(before.sa_handler, after.sa_handler);
}

// A benchmark writes its scratch token file while its --benchmark_out is pending (bench_lazy_loading's
// memory-mapped case ended with "PendingOutputFile: one at a time" before): both are written whole,
// a SIGTERM with both pending removes both temporary files, and the handlers come back only when
// the last one is done.
TEST_F(OutputFileTest, TwoFilesPendingAtOnceAreEachWrittenWhole) {
  struct sigaction before {}, during {}, after {};
  ::sigaction(SIGTERM, nullptr, &before);
  {
    PendingOutputFile results(file("results.json"), "--benchmark_out");
    results.write("{\"benchmarks\": []}");
    write_output_file(file("data.tok"), "tokens", "");
    ::sigaction(SIGTERM, nullptr, &during);
    EXPECT_NE(during.sa_handler, before.sa_handler) << "the results file is still pending";
    results.commit();
  }
  ::sigaction(SIGTERM, nullptr, &after);
  EXPECT_EQ(after.sa_handler, before.sa_handler);
  EXPECT_EQ(read_file(file("results.json")), "{\"benchmarks\": []}");
  EXPECT_EQ(read_file(file("data.tok")), "tokens");
}

TEST_F(OutputFileTest, SigtermWithTwoFilesPendingRemovesBothTemporaryFiles) {
  write_plain(file("run.json"), "the earlier file");
  const pid_t child = fork();
  if (child == 0) {
    PendingOutputFile first(file("run.json"), "--json");
    PendingOutputFile second(file("new.json"), "--record-memory");
    first.write("half of a new fi");
    second.write("half");
    std::raise(SIGTERM);
    _exit(0);  // not reached
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status)) << "exit status " << status;
  EXPECT_EQ(read_file(file("run.json")), "the earlier file");
  EXPECT_EQ(folder_entries(), std::vector<std::string>{"run.json"});
}

}  // namespace
}  // namespace trainmem
