// trainmem flags: every command and flag of trainmem, one a line, as the app knows them. The build
// makes the flag fuzzer's dictionary from it (fuzz/flags_dict.cmake), so a new flag is fuzzed
// without editing a list. `trainmem flags --by-technique`: each registered technique's folder and
// its flags, "checkpointing --recompute" a line, as its registration adds them (ci/check_names.py
// checks that no other code spells them). Hidden from --help: a tool of the build, not of a run.
#include <algorithm>
#include <functional>
#include <iostream>
#include <memory>

#include "common/train/technique.h"
#include "suites/trainmem/cli_common.h"
#include "suites/trainmem/techniques.h"

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

std::vector<std::string> flags_of(const Technique& technique) {
  CLI::App command;  // its own, so that only its flags are on it
  TrainingSetup setup;
  technique.add_flags(command, setup);
  std::vector<std::string> names;
  for (const CLI::Option* option : command.get_options())
    for (const std::string& name : option->get_lnames())
      if (name != "help") names.push_back("--" + name);
  return names;
}

void add_flags_command(CLI::App& app, Command& run) {
  CLI::App* flags = app.add_subcommand("flags", "Every command and flag of trainmem, one a line (the flag fuzzer's dictionary)");
  flags->group("");  // hidden from --help
  auto by_technique = std::make_shared<bool>(false);
  flags->add_flag("--by-technique", *by_technique, "Each registered technique's folder and flags, one flag a line");
  flags->callback([&app, &run, by_technique] {
    run = [&app, by_technique] {
      if (*by_technique)
        for (const Technique* t : registered_techniques())
          for (const std::string& flag : flags_of(*t)) std::cout << t->name() << ' ' << flag << '\n';
      else
        for (const std::string& word : commands_and_flags(app)) std::cout << word << '\n';
      return 0;
    };
  });
}

}  // namespace trainmem::cli
