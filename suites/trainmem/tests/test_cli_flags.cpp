// The trainmem command line in process, on the app main and the flag fuzzer build (add_commands).
//
// CLI11's parse errors in our words (common/cli/parse_errors.h): the app parses a command line,
// and the explanation of the error it raises is compared whole. One test per kind of CLI11 error the command line can
// raise; excludes(), needs() and option groups, which trainmem does not declare today, on an app
// of their own. Before, users read CLI11's texts ("--steps: At Most 1 required but received 2",
// "Could not convert: --pinned = maybe").
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "common/cli/parse_errors.h"
#include "common/cli/suggestion.h"
#include "common/model/model_config.h"
#include "common/tests/enum_table_checks.h"
#include "common/util/byte_size.h"
#include "suites/trainmem/cli_common.h"
#include "suites/trainmem/estimator/gpu_catalog.h"
#include "suites/trainmem/train_flags.h"

namespace trainmem::cli {
namespace {

struct Explained {
  std::string cli11;  // CLI11's text
  std::string ours;   // explain_parse_error's
};

// Parses `args` with `app`; the error it raises, explained. A test failure if it parses.
Explained parse_failure(CLI::App& app, const std::vector<std::string>& args) {
  std::vector<const char*> argv{"trainmem"};
  for (const std::string& a : args) argv.push_back(a.c_str());
  try {
    app.parse(static_cast<int>(argv.size()), argv.data());
  } catch (const CLI::ParseError& e) {
    return {e.what(), explain_parse_error(app, e)};
  }
  ADD_FAILURE() << "parsed without an error";
  return {};
}

// The explanation for `trainmem ARGS`, which must differ from CLI11's own text.
std::string explained(const std::vector<std::string>& args) {
  CLI::App app{"", "trainmem"};
  Command run;
  add_commands(app, run);
  const Explained e = parse_failure(app, args);
  EXPECT_NE(e.ours, e.cli11) << "CLI11's text passed through";
  return e.ours;
}

// What our own checks (flag_ranges.h, output_flags.h) say passes through as it is.
std::string passed_through(const std::vector<std::string>& args) {
  CLI::App app{"", "trainmem"};
  Command run;
  add_commands(app, run);
  const Explained e = parse_failure(app, args);
  EXPECT_EQ(e.ours, e.cli11);
  return e.ours;
}

// CLI::ArgumentMismatch: a flag given twice ("--steps: At Most 1 required but received 2").
TEST(CliParseErrors, AFlagGivenTwice) {
  EXPECT_EQ(explained({"train", "--steps", "1", "--steps", "2"}), "--steps is given 2 times; give it once");
  EXPECT_EQ(explained({"estimate", "--device", "cpu", "--device=meta"}), "--device is given 2 times; give it once");
}

// CLI::ArgumentMismatch: a flag last on the line without its value ("--steps: 1 required UINT:1
// to 1000000000 missing").
TEST(CliParseErrors, AFlagWithoutItsValue) {
  EXPECT_EQ(explained({"train", "--steps"}), "--steps needs a value: a whole number (1 to 1000000000)");
  EXPECT_EQ(explained({"train", "--lr"}), "--lr needs a value: a number (greater than 0, at most 3.40282e+38)");
  EXPECT_EQ(explained({"train", "--loader"}), "--loader needs a value: one of sequential, eager, lazy");
  EXPECT_EQ(explained({"info", "--device-memory"}), "--device-memory needs a value: a size");
  EXPECT_EQ(explained({"train", "--json"}), "--json needs a value: a file path");
  EXPECT_EQ(explained({"train", "--pinned"}), "--pinned needs a value: on|off (or true/false, yes/no, 1/0)");
}

// CLI::ConversionError: a value CLI11 cannot read as the flag's type ("Could not convert: --pinned = maybe").
TEST(CliParseErrors, AValueOfTheWrongType) {
  EXPECT_EQ(explained({"train", "--pinned", "maybe"}), "--pinned takes on|off (or true/false, yes/no, 1/0), not 'maybe'");
  EXPECT_EQ(explained({"estimate", "--pinned=sometimes"}),
            "--pinned takes on|off (or true/false, yes/no, 1/0), not 'sometimes'");
}

// CLI::ConversionError or ArgumentMismatch: a value given to a flag that takes none.
TEST(CliParseErrors, AValueForAFlagThatTakesNone) {
  EXPECT_EQ(explained({"info", "--json=maybe"}), "--json takes no value, not 'maybe'");
  EXPECT_EQ(explained({"train", "--optimizer-in-backward=maybe"}), "--optimizer-in-backward takes no value, not 'maybe'");
}

// CLI::ValidationError from an enum flag's check (common/cli/enum_flag.h: "--device: --device takes
// one of ...", the flag named once; before, CLI::IsMember's "--device: gpu not in
// {auto,cpu,cuda,meta}"); our own range checks already name the flag, the value and the range, and
// pass through.
TEST(CliParseErrors, AValueNotInTheList) {
  EXPECT_EQ(explained({"info", "--device", "gpu"}), "--device takes one of auto, cpu, cuda, meta, not 'gpu'");
  EXPECT_EQ(explained({"train", "--loader", "later"}), "--loader takes one of sequential, eager, lazy, not 'later'");
  EXPECT_EQ(explained({"estimate", "--pattern", "tpu"}), "--pattern takes one of cpu, cuda, not 'tpu'");
  EXPECT_EQ(passed_through({"train", "--batch", "0"}), "--batch: must be at least 1, not 0");
  EXPECT_EQ(passed_through({"train", "--json", ""}), "--json: needs the path of the file to write; an empty path names no file");
}

// CLI::RequiredError: no command ("A subcommand is required"), a word that is no command, a
// required flag or argument ("--out is required", "TRACE is required").
TEST(CliParseErrors, SomethingRequiredIsMissing) {
  EXPECT_EQ(explained({}), "name a command: info, replay, train, estimate, plan, max-batch, tokens");
  EXPECT_EQ(explained({"frobnicate"}), "unknown command 'frobnicate'");
  EXPECT_EQ(explained({"--bogus"}), "unknown flag '--bogus'");
  EXPECT_EQ(explained({"tokens"}), "trainmem tokens needs --out (a file path)");
  EXPECT_EQ(explained({"replay"}), "trainmem replay needs TRACE (a file path)");
}

// CLI::ExtrasError: words no flag takes ("The following argument was not expected: --bogus").
TEST(CliParseErrors, WordsNoFlagTakes) {
  EXPECT_EQ(explained({"info", "--bogus"}), "unknown flag '--bogus' for trainmem info");
  EXPECT_EQ(explained({"train", "--steps", "1", "2"}), "unexpected argument '2' for trainmem train");
  EXPECT_EQ(explained({"info", "cpu", "--bogus"}), "unexpected arguments 'cpu', '--bogus' for trainmem info");
}

// Two output flags naming one file (output_flags.h): a CLI::ValidationError of ours, naming both.
TEST(CliParseErrors, TwoOutputFlagsNamingOneFile) {
  EXPECT_EQ(passed_through({"train", "--json", "run.json", "--record-memory", "run.json"}),
            "--json and --record-memory both name the file run.json: give each its own (one would overwrite the other)");
  EXPECT_EQ(passed_through({"train", "--memory-snapshot", "a/../m.json", "--json", "x.json", "--record-memory", "./m.json"}),
            "--record-memory ./m.json and --memory-snapshot a/../m.json name the same file: give each its own (one would "
            "overwrite the other)");
}

// What trainmem does not declare today, on an app of its own: CLI11's excludes(), needs() and an
// option group of which at most one may be given.
struct RulesApp {
  CLI::App app{"", "trainmem"};
  int zero = 0, fsdp = 0, offload = 0, a = 0, b = 0;
  RulesApp() {
    CLI::App* train = app.add_subcommand("train");
    CLI::Option* zero_flag = train->add_option("--zero", zero);
    train->add_option("--fsdp", fsdp)->excludes(zero_flag);
    train->add_option("--offload", offload)->needs(zero_flag);
    CLI::Option_group* group = train->add_option_group("one of");
    group->add_option("--a", a);
    group->add_option("--b", b);
    group->require_option(0, 1);
  }
};

TEST(CliParseErrors, ExcludesNeedsAndAtMostOneOfAGroup) {
  RulesApp excludes, needs, group;
  Explained e = parse_failure(excludes.app, {"train", "--zero", "1", "--fsdp", "1"});
  EXPECT_EQ(e.ours, "--zero and --fsdp cannot be used together") << e.cli11;
  e = parse_failure(needs.app, {"train", "--offload", "1"});
  EXPECT_EQ(e.ours, "--offload needs --zero") << e.cli11;
  e = parse_failure(group.app, {"train", "--a", "1", "--b", "2"});
  EXPECT_EQ(e.ours, "--a and --b cannot be used together") << e.cli11;
}

// The flag fuzzer's dictionary, made at build time (fuzz/flags_dict.cmake: `trainmem flags`, then
// fuzz/flag_values.dict), names every subcommand and every flag, so that the fuzzer reaches each
// flag's checks (a hand-kept list missed --grads, --optimizer-in-backward and --pattern), and
// keeps every committed value.
TEST(CliFlags, TheFuzzDictionaryNamesEveryCommandAndFlag) {
  auto read = [](const char* path) {
    std::ifstream file(path);
    EXPECT_TRUE(file.good()) << path;
    std::stringstream text;
    text << file.rdbuf();
    return text.str();
  };
  const std::string dictionary = read(TRAINMEM_FLAGS_DICT), values = read(TRAINMEM_FLAG_VALUES);
  CLI::App app{"", "trainmem"};
  Command run;
  add_commands(app, run);
  const CLI::App& program = app;
  for (const CLI::App* command : program.get_subcommands(std::function<bool(const CLI::App*)>{})) {
    EXPECT_NE(dictionary.find('"' + command->get_name() + "\"\n"), std::string::npos) << command->get_name();
    for (const CLI::Option* option : command->get_options())
      for (const std::string& name : option->get_lnames()) {
        EXPECT_NE(dictionary.find("\"--" + name + "\"\n"), std::string::npos) << "--" << name << " of " << command->get_name();
        EXPECT_NE(dictionary.find("\"--" + name + "=\"\n"), std::string::npos) << "--" << name << "= of " << command->get_name();
      }
  }
  std::istringstream lines(values);
  for (std::string line; std::getline(lines, line);) {
    if (!line.empty() && line.front() == '"') {
      EXPECT_NE(dictionary.find(line + "\n"), std::string::npos) << line;
    }
  }
}

// `trainmem flags` (the dictionary's source) is hidden: not in --help, nor among the commands an
// error names.
TEST(CliFlags, TheFlagsCommandIsHidden) {
  CLI::App app{"", "trainmem"};
  Command run;
  add_commands(app, run);
  const std::vector<std::string> listed = commands_and_flags(app);
  EXPECT_EQ(listed.front(), "--help");
  EXPECT_NE(std::find(listed.begin(), listed.end(), "--optimizer-in-backward"), listed.end());
  EXPECT_NE(std::find(listed.begin(), listed.end(), "max-batch"), listed.end());
  EXPECT_EQ(app.help().find("  flags"), std::string::npos) << app.help();  // a command's line in the help
  EXPECT_EQ(explained({}), "name a command: info, replay, train, estimate, plan, max-batch, tokens");
}


// --- Habits (issue 27, item 8)

// The subcommands of the app main builds, each with the long names of its flags.
std::vector<std::pair<std::string, std::vector<std::string>>> every_command_and_flag() {
  CLI::App app{"", "trainmem"};
  Command run;
  add_commands(app, run);
  std::vector<std::pair<std::string, std::vector<std::string>>> commands;
  const CLI::App& program = app;
  for (const CLI::App* command : program.get_subcommands(std::function<bool(const CLI::App*)>{})) {
    std::vector<std::string> flags;
    for (const CLI::Option* option : command->get_options())
      for (const std::string& name : option->get_lnames()) flags.push_back("--" + name);
    commands.emplace_back(command->get_name(), flags);
  }
  return commands;
}

// How often `flag` appears in `text` as a whole name ("--fsdp" in "--fsdp-unit" does not count).
int times_named(const std::string& text, const std::string& flag) {
  int count = 0;
  for (std::size_t at = text.find(flag); at != std::string::npos; at = text.find(flag, at + 1)) {
    const std::size_t after = at + flag.size();
    const bool whole = after == text.size() || !(std::isalnum(static_cast<unsigned char>(text[after])) || text[after] == '-');
    count += whole ? 1 : 0;
  }
  return count;
}

TEST(CliTypos, EditDistanceCountsASwapOfNeighboursAsOneEdit) {
  EXPECT_EQ(edit_distance("mdoel", "model"), 1u);
  EXPECT_EQ(edit_distance("model", "model"), 0u);
  EXPECT_EQ(edit_distance("", "abc"), 3u);
  EXPECT_EQ(edit_distance("kitten", "sitting"), 3u);
  EXPECT_EQ(did_you_mean("--bogus", {"--json", "--device"}), "");
  EXPECT_EQ(did_you_mean(std::string(131072, 'x'), {"--model"}), "");  // a 128 KiB word: no table filled
}

// A mistyped flag gets the nearest flag of its command, for every subcommand and every flag;
// a mistyped command, the nearest command. Before: "unknown flag '--mdoel' for trainmem train".
TEST(CliTypos, AMistypedFlagOrCommandGetsTheNearestName) {
  EXPECT_EQ(explained({"train", "--mdoel", "tiny"}),
            "unexpected arguments '--mdoel', 'tiny' for trainmem train; did you mean --model (for --mdoel)?");
  EXPECT_EQ(explained({"estimate", "--mdoel=tiny"}), "unknown flag '--mdoel=tiny' for trainmem estimate; did you mean --model?");
  EXPECT_EQ(explained({"trian"}), "unknown command 'trian'; did you mean train?");
  EXPECT_EQ(explained({"--verison"}), "unknown flag '--verison'; did you mean --version?");
  EXPECT_EQ(explained({"info", "--bogus"}), "unknown flag '--bogus' for trainmem info");  // nothing near: no guess
  for (const auto& [command, flags] : every_command_and_flag())
    for (const std::string& flag : flags) {
      if (flag.size() < 6) continue;  // "--lr": a letter less is another short word, not a typo of it
      std::string typo = flag;
      typo.erase(3, 1);  // "--mdel"
      if (std::find(flags.begin(), flags.end(), typo) != flags.end()) continue;
      const std::string e = explained({command, typo});
      EXPECT_NE(e.find("did you mean"), std::string::npos) << command << " " << typo << ": " << e;
      EXPECT_EQ(times_named(e, flag), 1) << command << " " << typo << ": " << e;
    }
}

// An error names its flag once. Before: "--gpu: --gpu must be one of ...", "--fsdp-prefetch:
// --fsdp-prefetch takes on|off ...".
TEST(CliParseErrors, NoErrorRepeatsItsFlagName) {
  for (const auto& [command, flags] : every_command_and_flag())
    for (const std::string& flag : flags)
      for (const char* value : {"nonsense!", "-1", "1e999"}) {
        CLI::App app{"", "trainmem"};
        Command run;
        add_commands(app, run);
        std::vector<std::string> args{"trainmem", command, flag, value};
        std::vector<const char*> argv;
        for (const std::string& a : args) argv.push_back(a.c_str());
        try {
          app.parse(static_cast<int>(argv.size()), argv.data());
        } catch (const CLI::ParseError& e) {
          const std::string message = explain_parse_error(app, e);
          EXPECT_LE(times_named(message, flag), 1) << command << " " << flag << " " << value << ": " << message;
        }
      }
}

// Every flag that takes one of a list of names (an enum table, common/cli/enum_flag.h: its type in
// --help is "a|b|c") takes each of them, and for any other word names them all, in one form.
TEST(CliFlags, EveryFlagOfNamesTakesEachNameAndListsThemAll) {
  CLI::App app{"", "trainmem"};
  Command run;
  add_commands(app, run);
  const CLI::App& program = app;
  int flags = 0;
  for (const CLI::App* command : program.get_subcommands(std::function<bool(const CLI::App*)>{}))
    for (const CLI::Option* option : command->get_options()) {
      const std::string type = option->get_type_name();
      if (type.find('|') == std::string::npos || option->get_lnames().empty()) continue;
      ++flags;
      const std::string flag = "--" + option->get_lnames().front();
      SCOPED_TRACE(command->get_name() + " " + flag);
      std::string listed;
      for (const std::string& name : testing_support::split_at(type, "|")) {
        listed += (listed.empty() ? "" : ", ") + name;
        CLI::App each{"", "trainmem"};
        add_commands(each, run);
        std::vector<const char*> argv{"trainmem", command->get_name().c_str(), flag.c_str(), name.c_str()};
        try {
          each.parse(static_cast<int>(argv.size()), argv.data());
        } catch (const CLI::ParseError& e) {  // another rule of the flag's may refuse it ("--fsdp-prefetch needs --fsdp")
          const std::string said = explain_parse_error(each, e);
          EXPECT_EQ(said.find(flag + " takes"), std::string::npos) << said;
        }
      }
      EXPECT_EQ(explained({command->get_name(), flag, "nonsense"}), flag + " takes one of " + listed + ", not 'nonsense'");
    }
  EXPECT_GE(flags, 9);  // train's --device, --pattern, --precision, --grads, --attention, --loader, --offload, --fsdp*
}

// Model names in any case, and GPT-2's Hugging Face names, are the presets (with the preset's own name).
TEST(ModelNames, AnyCaseAndTheUsualAliasesNameThePresets) {
  const std::vector<std::pair<std::string, std::string>> same = {
      {"gpt2", "gpt2-124m"},         {"gpt2-small", "gpt2-124m"}, {"GPT2-Small", "gpt2-124m"},
      {"gpt2-medium", "gpt2-350m"}, {"gpt2-large", "gpt2-774m"}, {"gpt2-xl", "gpt2-1.5b"},
      {"GPT2-XL", "gpt2-1.5b"},     {"GPT2-124M", "gpt2-124m"},  {"Tiny", "tiny"}};
  for (const auto& [given, preset] : same) {
    SCOPED_TRACE(given);
    const ModelConfig a = model_preset(given), b = model_preset(preset);
    EXPECT_EQ(a.name, preset);
    EXPECT_EQ(a.num_parameters(), b.num_parameters());
    EXPECT_EQ(a.seq, b.seq);
  }
  TrainFlags flags;
  flags.model = "GPT2-Medium";
  flags.layers = 2;
  EXPECT_EQ(model_config(flags).name, "custom (from gpt2-350m)");
  try {
    model_preset("gpt5");
    ADD_FAILURE() << "gpt5 is no preset";
  } catch (const ModelConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("gpt2-medium=gpt2-350m"), std::string::npos) << e.what();
  }
}

// The GPU list: the common cards, each as the card reports its memory. The "NN GB" of a name is
// the vendor's nominal capacity; memory comes in binary sizes and ECC and the driver keep a part,
// so the reported total is at most NN GiB (a figure above it would be decimal GB read as bytes,
// or a slip), and more than 90% of it (ECC on GDDR keeps 1/16, the driver a few tens of MiB).
TEST(GpuCatalog, HoldsTheCommonCardsAsTheyReportTheirMemory) {
  for (const char* name : {"a10-24gb", "a10g-24gb", "v100-16gb", "v100-32gb", "rtx3090-24gb", "rtxa6000-48gb", "l4-24gb",
                           "l40s-48gb", "h200-141gb", "b200-180gb", "mi300x-192gb", "h100-80gb", "a100-80gb"})
    EXPECT_NO_THROW(estimator::find_gpu(name)) << name;
  EXPECT_EQ(estimator::find_gpu("H100-80GB").name, "h100-80gb");  // any case, as model names
  for (const estimator::GpuSpec& g : estimator::gpu_catalog()) {
    SCOPED_TRACE(g.name);
    const std::size_t gb_at = g.name.rfind("gb"), dash = g.name.rfind('-');
    ASSERT_TRUE(gb_at == g.name.size() - 2 && dash != std::string::npos);
    const std::size_t nominal = std::stoul(g.name.substr(dash + 1, gb_at - dash - 1));
    EXPECT_NE(g.description.find(std::to_string(nominal) + "GB"), std::string::npos) << g.description;
    EXPECT_LE(g.total_bytes, nominal * GiB);
    EXPECT_GT(g.total_bytes, nominal * GiB / 10 * 9);
    EXPECT_EQ(g.usable_bytes(), g.total_bytes - estimator::kCudaContextBytes);
  }
}

// 24G and 24GiB are one size, 24GB (any case) another, and --help says so where sizes are taken.
TEST(CliFlags, TheHelpOfASizeSaysWhatGAndGBMean) {
  CLI::App app{"", "trainmem"};
  Command run;
  add_commands(app, run);
  for (const char* command : {"info", "train", "estimate", "max-batch", "replay"}) {
    const std::string help = app.get_subcommand(command)->get_option("--device-memory")->get_description();
    EXPECT_NE(help.find("24G = 24GiB = " + std::to_string(parse_byte_size("24G")) + " bytes"), std::string::npos) << help;
    EXPECT_NE(help.find("24GB = 24gb = " + std::to_string(parse_byte_size("24gb")) + " bytes"), std::string::npos) << help;
  }
}

// Issue 27, item 5: a train command line pasted into estimate failed on --steps and --seed. Every
// flag of train, listed from train's own parser (not by hand), is taken by estimate as train takes
// it: with its default value and a few others (a number, a switch, a size), estimate parses the
// words train parses and refuses, with the same words, what train refuses -- never an unknown flag.
TEST(CliFlags, EstimateTakesEveryFlagOfTrain) {
  // What `trainmem COMMAND WORDS` says while parsing ("" when it parses), the command named as "COMMAND".
  auto parsed = [](const std::string& command, const std::vector<std::string>& words) -> std::string {
    CLI::App app{"", "trainmem"};
    Command run;
    add_commands(app, run);
    std::vector<const char*> argv{"trainmem", command.c_str()};
    for (const std::string& w : words) argv.push_back(w.c_str());
    try {
      app.parse(static_cast<int>(argv.size()), argv.data());
    } catch (const CLI::ParseError& e) {
      std::string said = explain_parse_error(app, e);
      for (std::size_t at; (at = said.find("trainmem " + command)) != std::string::npos;)
        said.replace(at, command.size() + 9, "COMMAND");
      return said;
    }
    return {};
  };
  CLI::App app{"", "trainmem"};
  Command run;
  add_commands(app, run);
  const CLI::App* train = app.get_subcommand("train");
  int flags = 0, taken = 0;
  for (const CLI::Option* option : train->get_options()) {
    if (option == train->get_help_ptr() || option->get_lnames().empty()) continue;
    const std::string name = "--" + option->get_lnames().front();
    std::vector<std::vector<std::string>> tries;
    if (option->get_expected_min() == 0) tries.push_back({name});
    for (const std::string& value : {option->get_default_str(), std::string("1"), std::string("on"), std::string("16GiB")})
      if (!value.empty()) tries.push_back({name, value});
    bool train_takes_one = false;
    for (const std::vector<std::string>& words : tries) {
      const std::string by_train = parsed("train", words), by_estimate = parsed("estimate", words);
      EXPECT_EQ(by_estimate, by_train) << words.front() << (words.size() > 1 ? " " + words[1] : "");
      train_takes_one = train_takes_one || by_train.empty();
    }
    ++flags;
    taken += train_takes_one ? 1 : 0;
  }
  EXPECT_GT(flags, 20) << "train's flags were not found";  // a guard on the listing itself (train has more than 30)
  EXPECT_GT(taken, flags / 2) << "the values tried are mostly refused: the comparison says little";
}

}  // namespace
}  // namespace trainmem::cli
