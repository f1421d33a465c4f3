// The trainmem program as the command-line tests run it: the binary built beside them
// (TRAINMEM_BINARY, set by CMake), with its stdout and stderr captured apart.
#pragma once
#include <string>

#include "common/tests/command_runner.h"

namespace trainmem::cli_test {

using CliRun = testing_support::CommandResult;

// Runs `PREFIX trainmem ARGS` (ARGS is shell text; PREFIX e.g. "ulimit -v 1000000;").
inline CliRun trainmem(const std::string& args, const std::string& prefix = "") {
  return testing_support::run_program(prefix, TRAINMEM_BINARY, args);
}

// A scratch file of this test process (ctest runs several at once).
inline std::string temp_path(const std::string& name) { return testing_support::scratch_path(name); }

}  // namespace trainmem::cli_test
