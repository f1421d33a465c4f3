// The settings the ranks compare (command_settings.h), read from CLI11 after parsing: every
// option in order with its value as typed or "(default)", the version first, help and the output
// files (add_output_flag: their paths may differ from rank to rank) left out.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/cli/output_flags.h"
#include "common/results/result_json.h"
#include "suites/trainmem/command_settings.h"

namespace trainmem::cli {
namespace {

Settings parsed(std::vector<std::string> args) {
  CLI::App app{"test", "trainmem"};
  CLI::App* train = app.add_subcommand("train");
  long steps = 50;
  std::size_t layers = 0;
  std::vector<int> sizes;
  std::string json;
  train->add_option("--steps", steps)->capture_default_str();
  train->add_option("--layers", layers);
  train->add_option("-s,--sizes", sizes);
  add_output_flag(*train, "--json", json, "the result file");
  std::vector<const char*> argv{"trainmem", "train"};
  for (const std::string& a : args) argv.push_back(a.c_str());
  app.parse(static_cast<int>(argv.size()), argv.data());
  return command_settings(*train);
}

TEST(CommandSettings, EveryOptionAsTypedOrDefaultAfterTheVersion) {
  const Settings expected = {{"the trainmem version", trainmem_version()},
                             {"--steps", "3"},
                             {"--layers", "(default)"},
                             {"--sizes", "1 2"}};
  EXPECT_EQ(parsed({"--steps", "3", "-s", "1", "--sizes", "2", "--json", "out.json"}), expected);
}

// The values as typed: "--steps 3" and "--steps 03" are different settings, and a value equal to
// the default is not "(default)" (the ranks must be started alike, not merely equivalently).
TEST(CommandSettings, ValuesAreComparedAsTyped) {
  EXPECT_EQ(parsed({"--steps", "03"})[1], (Setting{"--steps", "03"}));
  EXPECT_EQ(parsed({"--steps", "50"})[1], (Setting{"--steps", "50"}));
  EXPECT_EQ(parsed({})[1], (Setting{"--steps", "(default)"}));
}

TEST(CommandSettings, OutputPathsAndHelpAreLeftOut) {
  for (const Setting& s : parsed({"--json", "a.json"})) {
    EXPECT_NE(s.name, "--json");
    EXPECT_NE(s.name, "--help");
  }
}

}  // namespace
}  // namespace trainmem::cli
