// The trainmem command line: every subcommand on one CLI11 app. main.cpp and the flag fuzzer
// (fuzz/fuzz_flags.cpp) both build their app here, so the fuzzer parses exactly what users type into.
#include "suites/trainmem/cli_common.h"

namespace trainmem::cli {

void add_commands(CLI::App& app, Command& run) {
  app.description("trainmem: benchmark suites for the techniques that make training fit in GPU memory");
  app.footer("Run 'trainmem <command> --help' for a command's flags.\n"
             "Exit codes: 0 ok; 1 the run failed (e.g. out of memory); 2 a wrong flag, value or input file.");
  app.require_subcommand(1);
  add_info_command(app, run);
  add_replay_command(app, run);
  add_train_command(app, run);
  add_estimate_command(app, run);
  add_max_batch_command(app, run);
  add_tokens_command(app, run);
}

}  // namespace trainmem::cli
