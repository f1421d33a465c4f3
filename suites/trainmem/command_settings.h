// The settings a subcommand was started with, taken from CLI11 after parsing, for the ranks of
// mpirun to compare before they start (common/comm/rank_agreement.h).
#pragma once
#include <CLI/CLI.hpp>

#include <string>

#include "common/comm/rank_agreement.h"

namespace trainmem::cli {

// The trainmem version first, then every option of `command` in the order it was added: its
// name ("--steps") and its values as given, or "(default)" when not given. Every option is read
// from CLI11, so a flag added later is compared without more code. Left out: --help, and the
// output files (common/cli/output_flags.h), whose paths may differ from rank to rank.
Settings command_settings(const CLI::App& command);

}  // namespace trainmem::cli
