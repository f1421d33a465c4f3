// Running a program from a test, as a user would from a shell: its exit code, its stdout and its
// stderr kept apart (the CLI's contract is about which stream says what). Used by the tests that
// drive the real `trainmem` binary, alone or under mpirun.
#pragma once
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

namespace trainmem::testing_support {

struct CommandResult {
  int exit_code = -1;  // -1: killed by a signal (a crash) or could not start
  std::string out, err;
};

inline std::string read_text_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A path for this process's scratch files (ctest may run several test processes at once).
inline std::string scratch_path(const std::string& name) {
  std::string path = ::testing::TempDir();  // built with += : GCC 12 warns falsely on "lit" + string
  path += "/trainmem_";
  path += std::to_string(getpid());
  path += "_";
  path += name;
  return path;
}

// Runs `command` (shell text) with stdout read from a pipe and stderr sent to a scratch file.
inline CommandResult run_command(const std::string& command) {
  const std::string err_path = scratch_path("stderr.txt");
  std::string line = command;
  line += " 2>'";
  line += err_path;
  line += "'";
  CommandResult r;
  FILE* pipe = popen(line.c_str(), "r");
  if (!pipe) return r;
  char buffer[4096];
  std::size_t n;
  while ((n = fread(buffer, 1, sizeof buffer, pipe)) > 0) r.out.append(buffer, n);
  const int status = pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.err = read_text_file(err_path);
  std::remove(err_path.c_str());
  return r;
}

// `PREFIX 'BINARY' ARGS`: e.g. prefix "mpirun -np 2" (or "" for a plain run).
inline CommandResult run_program(const std::string& prefix, const std::string& binary, const std::string& args) {
  std::string command = prefix;
  command += " '";
  command += binary;
  command += "' ";
  command += args;
  return run_command(command);
}

inline int count_lines(const std::string& s) {
  int n = 0;
  for (char c : s) n += (c == '\n');
  return n;
}

}  // namespace trainmem::testing_support
