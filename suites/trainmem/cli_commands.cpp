// The trainmem command line: every subcommand on one CLI11 app. main.cpp and the flag fuzzer
// (fuzz/fuzz_flags.cpp) both build their app here, so the fuzzer parses exactly what users type into.
#include "common/cli/output_flags.h"
#include "common/results/result_json.h"
#include "suites/trainmem/cli_common.h"

namespace trainmem::cli {

void add_commands(CLI::App& app, Command& run) {
  app.description("trainmem: benchmark suites for the techniques that make training fit in GPU memory");
  app.footer("Run 'trainmem <command> --help' for a command's flags.\n"
             "Exit codes: 0 ok; 1 the run failed (e.g. out of memory); 2 a wrong flag, value or input file.");
  app.require_subcommand(1);
  // "trainmem 0.1.0": CMake's project(VERSION), the version every result file records.
  app.set_version_flag("--version", std::string("trainmem ") + trainmem_version(), "Print the version and exit");
  add_info_command(app, run);
  add_replay_command(app, run);
  add_train_command(app, run);
  add_estimate_command(app, run);
  add_plan_command(app, run);
  add_max_batch_command(app, run);
  add_tokens_command(app, run);
  add_flags_command(app, run);
  // Once every flag is read, for whichever command was chosen: no two output flags name one file.
  // (A CLI::ParseError from here ends the parse like any other: main prints it, the fuzzer expects it.)
  app.final_callback([&app] {
    for (const CLI::App* command : app.get_subcommands()) check_distinct_output_files(*command);
  });
}

}  // namespace trainmem::cli
