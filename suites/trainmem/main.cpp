// trainmem: one program, one subcommand per task. See `trainmem --help`, and cli_common.h for
// the exit codes.
#include <CLI/CLI.hpp>

#include <iostream>
#include <string>

#include "common/allocator/trace_replay.h"
#include "common/cli/parse_errors.h"
#include "common/comm/communicator.h"
#include "common/comm/rank_agreement.h"
#include "common/data/token_file.h"
#include "common/model/model_config.h"
#include "common/device/device.h"
#include "common/util/byte_size.h"
#include "common/util/standard_output.h"
#include "suites/trainmem/cli_common.h"
#include "suites/trainmem/techniques.h"

namespace {

// Error messages are printed on one line whatever the library put in them; a trailing period is
// dropped so that we can add our own sentence after it.
std::string one_line(std::string s) {
  for (char& c : s)
    if (c == '\n' || c == '\r') c = ' ';
  while (!s.empty() && (s.back() == ' ' || s.back() == '.')) s.pop_back();
  return s;
}

// A failed run: "trainmem: <message>" and the exit code. Under mpirun the failure ends every
// rank (abort_world), the message naming this rank: a rank that returned alone would leave the
// others waiting in a collective.
int fail(const std::string& message, int exit_code) {
  if (trainmem::launched_by_mpirun()) trainmem::abort_world(message, exit_code);
  std::cerr << "trainmem: " << message << '\n';
  return exit_code;
}

std::string error_line(const std::exception& e) {
  std::string line = "error: ";
  line += one_line(e.what());
  return line;
}

int input_error(const std::exception& e) { return fail(error_line(e), 2); }

// Ranks started with different settings (rank_agreement.h) find it out together, so each prints
// its own line and returns 2 (MPI finalizes at exit). Not fail(): the first rank's MPI_Abort
// could kill the others before they have printed.
int ranks_disagree(const trainmem::RanksDisagree& e) {
  std::string line = "trainmem: rank ";
  line += std::to_string(e.rank);
  line += " of ";
  line += std::to_string(e.world_size);
  line += ": ";
  line += error_line(e);
  line += '\n';
  std::cerr << line;  // one write: mpirun must not mix it with another rank's line
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  trainmem::guard_standard_output();  // before any file is opened (standard_output.h)
  trainmem::init_mpi_if_launched();  // under mpirun: MPI from the start, so any failure can end every rank
  CLI::App app{"", "trainmem"};
  trainmem::cli::Command run;
  trainmem::cli::add_commands(app, run);  // cli_commands.cpp; the flag fuzzer builds the same app

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);  // prints the help of the subcommand named, if any; exit code 0
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);  // "trainmem 0.1.0" on stdout; exit code 0
  } catch (const CLI::ParseError& e) {
    // CLI11's error in our words: the flag, what was given, what it takes (parse_errors.h).
    // Through fail(): under mpirun the ranks whose flags parsed are already waiting for this one.
    std::string message = "error: ";
    message += one_line(trainmem::cli::explain_parse_error(app, e));
    message += ". Run '" + trainmem::cli::command_path(app) + " --help' for usage.";
    return fail(message, 2);
  }
  if (!run) {  // cannot happen with require_subcommand(1), but never call an empty function
    std::cerr << app.help();
    return 2;
  }

  try {
    const int exit_code = run();
    trainmem::check_standard_output();  // output that was lost is a failed run
    if (exit_code != 0 && trainmem::launched_by_mpirun()) {
      std::string why = "the run failed (exit code ";
      why += std::to_string(exit_code);
      why += "; the reason is above)";
      trainmem::abort_world(why, exit_code);
    }
    return exit_code;
  } catch (const trainmem::TraceError& e) {
    return input_error(e);
  } catch (const trainmem::ByteSizeError& e) {
    return input_error(e);
  } catch (const trainmem::AllocatorConfigError& e) {
    return input_error(e);
  } catch (const trainmem::DatasetExceedsHostMemory& e) {
    std::string line = error_line(e) + "; use a smaller dataset";  // and what the registrations propose
    for (const std::string& remedy : trainmem::registered_techniques().host_dataset_remedies()) line += ", or " + remedy;
    return fail(line, 2);
  } catch (const trainmem::DataError& e) {
    return input_error(e);  // a missing, truncated or foreign data file
  } catch (const trainmem::ModelConfigError& e) {
    return input_error(e);  // an unknown preset or an impossible shape
  } catch (const trainmem::DeviceError& e) {
    return input_error(e);  // a device that was asked for and is not there: change the flag
  } catch (const std::invalid_argument& e) {
    return input_error(e);  // a flag value that cannot work (e.g. --loss-scale without fp16)
  } catch (const trainmem::RanksDisagree& e) {
    return ranks_disagree(e);
  } catch (const trainmem::OutOfMemoryError& e) {
    return fail(e.what(), 1);  // the full multi-line report
  } catch (const std::bad_alloc&) {
    return fail("this machine ran out of host memory (the program's own bookkeeping, not the device budget): "
                "use a smaller --batch, --world-size or model",
                1);
  } catch (const std::exception& e) {
    return fail(error_line(e), 1);
  }
}
