// trainmem flags: every command and flag of trainmem, one a line, as the app knows them. The build
// makes the flag fuzzer's dictionary from it (fuzz/flags_dict.cmake), so a new flag is fuzzed
// without editing a list. Hidden from --help: a tool of the build, not of a training run.
#include <algorithm>
#include <functional>
#include <iostream>

#include "suites/trainmem/cli_common.h"

namespace trainmem::cli {

std::vector<std::string> commands_and_flags(const CLI::App& app) {
  std::vector<std::string> words;
  auto add = [&words](const std::string& word) {
    if (std::find(words.begin(), words.end(), word) == words.end()) words.push_back(word);
  };
  auto add_flags_of = [&add](const CLI::App& command) {
    for (const CLI::Option* option : command.get_options()) {
      for (const std::string& name : option->get_lnames()) add("--" + name);
      for (const std::string& name : option->get_snames()) add("-" + name);
    }
  };
  add_flags_of(app);
  for (const CLI::App* command : app.get_subcommands(std::function<bool(const CLI::App*)>{})) {
    add(command->get_name());
    add_flags_of(*command);
  }
  return words;
}

void add_flags_command(CLI::App& app, Command& run) {
  CLI::App* flags = app.add_subcommand("flags", "Every command and flag of trainmem, one a line (the flag fuzzer's dictionary)");
  flags->group("");  // hidden from --help
  flags->callback([&app, &run] {
    run = [&app] {
      for (const std::string& word : commands_and_flags(app)) std::cout << word << '\n';
      return 0;
    };
  });
}

}  // namespace trainmem::cli
