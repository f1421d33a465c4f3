#include "suites/trainmem/command_settings.h"

#include "common/cli/output_flags.h"
#include "common/results/result_json.h"

namespace trainmem::cli {

namespace {

// "--steps" (the long name), else "-s", else the positional name.
std::string option_name(const CLI::Option& option) {
  std::string name;
  if (!option.get_lnames().empty()) {
    name = "--";
    name += option.get_lnames().front();
  } else if (!option.get_snames().empty()) {
    name = "-";
    name += option.get_snames().front();
  } else {
    name = option.get_name(/*positional=*/true);
  }
  return name;
}

// The values as they were typed (several are joined by spaces), or "(default)".
std::string given_value(const CLI::Option& option) {
  if (option.count() == 0) return "(default)";
  std::string value;
  for (const std::string& result : option.results()) {
    if (!value.empty()) value += ' ';
    value += result;
  }
  return value;
}

}  // namespace

Settings command_settings(const CLI::App& command) {
  Settings settings{{"the trainmem version", trainmem_version()}};
  for (const CLI::Option* option : command.get_options()) {
    if (option == command.get_help_ptr() || option == command.get_help_all_ptr() || is_output_flag(*option)) continue;
    settings.push_back({option_name(*option), given_value(*option)});
  }
  return settings;
}

}  // namespace trainmem::cli
