// Fuzz target: the trainmem command line. The input is split into arguments at NUL and newline
// bytes, and parsed — argv[0] "trainmem", then those arguments — by the app main.cpp builds
// (add_commands); the chosen command is not run. What main does with a parse error is done too
// (its explanation, common/cli/parse_errors.h, and the help text).
//
// Expected, not findings: CLI::ParseError, which main catches (help, or a one-line error and
// exit 2). Anything else thrown by the parse is a finding: main would not catch it, and the
// program would end in std::terminate. So is a crash, a sanitizer report or a hang.
#include <CLI/CLI.hpp>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/cli/parse_errors.h"
#include "suites/trainmem/cli_common.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::vector<std::string> args{"trainmem"};
  std::string current;
  for (std::size_t i = 0; i < size; ++i) {
    const char c = static_cast<char>(data[i]);
    if (c == '\0' || c == '\n') {
      args.push_back(current);
      current.clear();
    } else {
      current += c;
    }
  }
  if (!current.empty()) args.push_back(current);  // a trailing separator ends the last argument
  std::vector<const char*> argv;
  for (const std::string& a : args) argv.push_back(a.c_str());
  argv.push_back(nullptr);

  CLI::App app{"", "trainmem"};
  trainmem::cli::Command run;
  trainmem::cli::add_commands(app, run);
  try {
    app.parse(static_cast<int>(args.size()), argv.data());
  } catch (const CLI::CallForHelp&) {
    (void)app.help();
    return 0;
  } catch (const CLI::CallForAllHelp&) {
    (void)app.help("", CLI::AppFormatMode::All);
    return 0;
  } catch (const CLI::ParseError& e) {
    (void)trainmem::cli::explain_parse_error(app, e);  // what main prints
    (void)trainmem::cli::command_path(app);
    return 0;
  }
  return 0;
}
