// The enum tables (common/cli/enum_table.h) and the flags made from them (common/cli/enum_flag.h):
// on a table of the test's own, then every table common/ declares. The suites check theirs in
// their own tests (common/tests/enum_table_checks.h).
#include <gtest/gtest.h>

#include <CLI/CLI.hpp>

#include <stdexcept>
#include <string>
#include <vector>

#include "common/allocator/allocator_config.h"
#include "common/cli/enum_flag.h"
#include "common/cli/enum_table.h"
#include "common/cli/parse_errors.h"
#include "common/device/device.h"
#include "common/model/attention_kind.h"
#include "common/model/precision.h"
#include "common/sharding/sharded_adamw.h"
#include "common/tests/enum_table_checks.h"
#include "common/train/gradient_mode.h"

namespace trainmem {
namespace {

enum class Colour { red, green, blue, unnamed };
constexpr auto kColours =
    cli::enum_table<Colour>("--colour", {{Colour::red, "red"}, {Colour::green, "green"}, {Colour::blue, "blue"}});

TEST(EnumTable, ParsesNamesAndSaysWhatItTakes) {
  static_assert(kColours.name(Colour::blue) == "blue", "a name is known while compiling");
  EXPECT_EQ(kColours.parse("green"), Colour::green);
  EXPECT_EQ(kColours.name(Colour::unnamed), "?");
  EXPECT_EQ(kColours.choices(), "red|green|blue");
  EXPECT_EQ(kColours.one_of(), "one of red, green, blue");
  try {
    kColours.parse("Green");  // names are matched exactly, as before
    FAIL() << "parsed";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "--colour takes one of red, green, blue, not 'Green'");
  }
  testing_support::expect_whole_table(kColours);
}

// What `command ARGS` says while parsing, in the program's words ("" when it parses).
std::string parse_error(CLI::App& command, std::vector<std::string> args) {
  args.insert(args.begin(), "test");
  std::vector<const char*> argv;
  for (const std::string& a : args) argv.push_back(a.c_str());
  try {
    command.parse(static_cast<int>(argv.size()), argv.data());
  } catch (const CLI::ParseError& e) {
    return cli::explain_parse_error(command, e);
  }
  return "";
}

// The flag of a table: its type and default in --help, its value stored, its errors.
TEST(EnumFlag, TakesTheNamesOfItsTableAndSaysThemInHelpAndErrors) {
  Colour colour = Colour::green;
  CLI::App command{"", "test"};
  cli::add_enum_flag(command, kColours, colour, "The colour");
  EXPECT_NE(command.help().find("--colour red|green|blue=green"), std::string::npos) << command.help();

  EXPECT_EQ(parse_error(command, {"--colour", "blue"}), "");
  EXPECT_EQ(colour, Colour::blue);

  CLI::App wrong{"", "test"};
  cli::add_enum_flag(wrong, kColours, colour, "The colour");
  EXPECT_EQ(parse_error(wrong, {"--colour", "pink"}), "--colour takes one of red, green, blue, not 'pink'");
  CLI::App missing{"", "test"};
  cli::add_enum_flag(missing, kColours, colour, "The colour");
  EXPECT_EQ(parse_error(missing, {"--colour"}), "--colour needs a value: one of red, green, blue");
}

// common/'s tables. The suites' in their tests: test_lazy_loading (--loader), test_fsdp (--fsdp,
// --fsdp-prefetch), test_checkpointing (--recompute's words), test_allocator_suite (--empty-cache's).
TEST(EnumTable, EveryTableOfCommonIsWhole) {
  testing_support::expect_whole_table(kAttentionKinds);
  testing_support::expect_whole_table(kPrecisions);
  testing_support::expect_whole_table(kGradientModes);
  testing_support::expect_whole_table(kOffloads);
  testing_support::expect_whole_table(kDeviceChoices);
  testing_support::expect_whole_table(kPatterns);
  testing_support::expect_whole_table(kAllocatorBackends);
}

}  // namespace
}  // namespace trainmem
