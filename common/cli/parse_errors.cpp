#include "common/cli/parse_errors.h"

#include "common/cli/suggestion.h"

#include <algorithm>
#include <functional>
#include <optional>
#include <utility>
#include <vector>

namespace trainmem::cli {

namespace {

// The subcommand chosen on the command line, else the program itself.
const CLI::App& chosen_command(const CLI::App& app) {
  const std::vector<CLI::App*> chosen = app.get_subcommands();
  return chosen.empty() ? app : *chosen.front();
}

// The option CLI11 names in a message ("--steps", or a positional's name, "TRACE").
const CLI::Option* find_option(const CLI::App& command, const std::string& name) {
  if (const CLI::Option* option = command.get_option_no_throw(name)) return option;
  return command.get_parent() != nullptr ? command.get_parent()->get_option_no_throw(name) : nullptr;
}

// Every flag `command` knows, as typed: "--model", "-h".
std::vector<std::string> flag_names(const CLI::App& command) {
  std::vector<std::string> names;
  for (const CLI::Option* option : command.get_options()) {
    for (const std::string& name : option->get_lnames()) names.push_back("--" + name);
    for (const std::string& name : option->get_snames()) names.push_back("-" + name);
  }
  return names;
}

// "; did you mean --model?" for a word that is no flag of `command` ("--mdoel" or "--mdoel=x").
std::string flag_suggestion(const CLI::App& command, const std::string& word) {
  return did_you_mean(word.substr(0, word.find('=')), flag_names(command));
}

// "sequential,eager,lazy" with ',' -> "one of sequential, eager, lazy".
std::string one_of(const std::string& names, char separator) {
  std::string words = "one of ";
  for (char c : names) words += c == separator ? std::string(", ") : std::string(1, c);
  return words;
}
// "{sequential,eager,lazy}" (CLI::IsMember's set) -> "one of sequential, eager, lazy".
std::string one_of(const std::string& set) { return one_of(set.substr(1, set.size() - 2), ','); }

// What an option takes, in words, from its CLI11 type name ("UINT:1 to 4096", "BOOLEAN",
// "TEXT:{a,b}", "SIZE", the names of an enum flag "a|b" (enum_flag.h)): "a whole number (1 to
// 4096)", "on|off (or true/false, yes/no, 1/0)", "one of a, b".
std::string what_it_takes(const CLI::Option& option) {
  if (option.get_expected_max() == 0) return "no value";  // a flag: --json, not --json=yes
  const std::string full = option.get_type_name();
  const std::size_t colon = full.find(':');
  const std::string type = full.substr(0, colon), range = colon == std::string::npos ? "" : full.substr(colon + 1);
  // BOOLEAN: what CLI11 reads as true or false (it also takes t/f, y/n, enable/disable and numbers).
  const std::vector<std::pair<std::string, std::string>> words_of_type = {
      {"BOOLEAN", "on|off (or true/false, yes/no, 1/0)"}, {"INT", "a whole number"}, {"UINT", "a whole number"},
      {"FLOAT", "a number"}, {"TEXT", "a value"}, {"STR", "a value"}, {"FILE", "a file path"}, {"SIZE", "a size"}};
  std::string words = type.empty() ? "a value" : type;  // a type named for users
  if (type.find('|') != std::string::npos) words = one_of(type, '|');  // an enum flag's names
  for (const auto& [name, meaning] : words_of_type)
    if (type == name) words = meaning;
  if (range.size() >= 2 && range.front() == '{' && range.back() == '}') return one_of(range);
  return range.empty() ? words : words + " (" + range + ")";
}

// "--pinned takes on|off (...), not 'maybe'"; CLI11's name when the option is not found.
std::string takes_not(const CLI::App& command, const std::string& name, const std::string& given) {
  const CLI::Option* option = find_option(command, name);
  return name + " takes " + (option ? what_it_takes(*option) : std::string("another value")) + ", not '" + given + "'";
}

// The words CLI11 did not read, as one phrase: "unknown flag '--bogus'", "unexpected arguments 'a', 'b'".
std::string unread_words(const std::vector<std::string>& words) {
  if (words.size() == 1)
    return (words.front().rfind('-', 0) == 0 ? "unknown flag '" : "unexpected argument '") + words.front() + "'";
  std::string phrase = "unexpected arguments ";
  for (std::size_t i = 0; i < words.size(); ++i) phrase += (i ? ", '" : "'") + words[i] + "'";
  return phrase;
}

// The flags of `command` that the unread words starting with '-' were meant to be: "; did you
// mean --model?" for one such word, "; did you mean --model (for --mdoel)?" naming each of several.
std::string suggestions_for(const CLI::App& command, const std::vector<std::string>& words) {
  std::vector<std::pair<std::string, std::string>> meant;  // {word, suggestion}
  for (const std::string& word : words)
    if (word.rfind('-', 0) == 0)
      if (std::string suggestion = flag_suggestion(command, word); !suggestion.empty()) meant.emplace_back(word, suggestion);
  if (meant.size() == 1 && words.size() == 1) return meant.front().second;
  std::string text;
  for (const auto& [word, suggestion] : meant)  // "; did you mean --model?" -> "; did you mean --model (for --mdoel)?"
    text += suggestion.substr(0, suggestion.size() - 1) + " (for " + word.substr(0, word.find('=')) + ")?";
  return text;
}

// The words CLI11 did not read, explained: "unknown flag '--mdoel' for trainmem train; did you
// mean --model?"; "" when it read every word.
std::string unread_explained(const CLI::App& app, const CLI::App& command) {
  const std::vector<std::string> words = app.remaining(/*recurse=*/true);
  return words.empty() ? "" : unread_words(words) + " for " + command_path(app) + suggestions_for(command, words);
}

// CLI11's texts are taken apart with find(), not std::regex: its matcher recurses once per
// character, and a command-line word can be 128 KiB long.
bool starts_with(const std::string& text, const std::string& prefix) { return text.rfind(prefix, 0) == 0; }
bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() && text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}
// `text` split at the first `separator`: {before, after}, or nothing when it is not there.
std::optional<std::pair<std::string, std::string>> split(const std::string& text, const std::string& separator) {
  const std::size_t at = text.find(separator);
  if (at == std::string::npos) return std::nullopt;
  return std::make_pair(text.substr(0, at), text.substr(at + separator.size()));
}

// Each kind of CLI11 error, its text in CLI11 2.x (CLI/Error.hpp) and ours.

// "Could not convert: --pinned = maybe" (a value CLI11 cannot turn into the flag's type);
// "The value X is not an allowed value for --flag" (a CLI::Transformer's).
std::string explain_conversion(const CLI::App& command, const std::string& what) {
  const std::string prefix = "Could not convert: ";
  if (starts_with(what, prefix))
    if (const auto name_value = split(what.substr(prefix.size()), " = "))
      return takes_not(command, name_value->first, name_value->second);
  const std::string allowed = " is not an allowed value for ";
  const std::size_t at = what.rfind(allowed);
  if (starts_with(what, "The value ") && at != std::string::npos)
    return takes_not(command, what.substr(at + allowed.size()), what.substr(10, at - 10));
  return what;
}

// "--steps: At Most 1 required but received 2" (a flag given twice); "--steps: 1 required UINT
// missing" (a flag last on the line, without its value); "At least N"; "disallowed flag override".
std::string explain_mismatch(const CLI::App& command, const std::string& what) {
  if (const auto at_most = split(what, ": At Most ")) {
    if (const auto counts = split(at_most->second, " required but received "))
      return counts->first == "1" ? at_most->first + " is given " + counts->second + " times; give it once"
                                  : at_most->first + " takes at most " + counts->first + " values, not " + counts->second;
  }
  if (const auto at_least = split(what, ": At least ")) {
    if (const auto counts = split(at_least->second, " required but received "))
      return at_least->first + " takes at least " + counts->first + " values, not " + counts->second;
  }
  if (const auto name_rest = split(what, ": "); name_rest && ends_with(what, " missing")) {
    const CLI::Option* option = find_option(command, name_rest->first);
    return name_rest->first + " needs a value: " + (option ? what_it_takes(*option) : std::string("see --help"));
  }
  const std::string override_text = " was given a disallowed flag override";
  if (ends_with(what, override_text)) return what.substr(0, what.size() - override_text.size()) + " takes no value";
  return what;
}

// "--device: gpu not in {auto,cpu,cuda,meta}" (CLI::IsMember); every other check (ours, in
// flag_ranges.h) already says "--flag: what is wrong" and passes through.
std::string explain_validation(const std::string& what) {
  const std::size_t set = what.rfind(" not in {");
  const auto name_rest = split(what, ": ");
  // A check whose message names its flag itself ("--fsdp-prefetch takes on|off ..."): CLI11's
  // "--fsdp-prefetch: " before it would say the name twice.
  if (name_rest && starts_with(name_rest->second, name_rest->first + " ")) return name_rest->second;
  // A hidden flag's check (CLI11 names it ""): its message names the flag.
  if (name_rest && name_rest->first.empty()) return name_rest->second;
  if (set == std::string::npos || !name_rest || !ends_with(what, "}") || set < name_rest->first.size() + 2) return what;
  const std::size_t value_at = name_rest->first.size() + 2;
  return name_rest->first + " takes " + one_of(what.substr(set + 8)) + ", not '" + what.substr(value_at, set - value_at) + "'";
}

// "A subcommand is required" (no command, or a word that is none); "--out is required", "TRACE is
// required"; "Requires at most 1 options be given from [--a,--b]" (an option group).
std::string explain_required(const CLI::App& app, const CLI::App& command, const std::string& what) {
  if (&command == &app && what.find("subcommand") != std::string::npos) {
    const std::vector<std::string> words = app.remaining();
    std::vector<std::string> commands;
    for (const CLI::App* sub : app.get_subcommands(std::function<bool(const CLI::App*)>{}))
      if (!sub->get_group().empty()) commands.push_back(sub->get_name());  // not the hidden ones (group "")
    if (!words.empty())
      return words.front().rfind('-', 0) == 0
                 ? "unknown flag '" + words.front() + "'" + flag_suggestion(app, words.front())
                 : "unknown command '" + words.front() + "'" + did_you_mean(words.front(), commands);
    std::string names;
    for (const std::string& name : commands) names += (names.empty() ? "" : ", ") + name;
    return "name a command: " + names;
  }
  // An option group of which at most one may be given (CLI11's require_option(0, 1)): the ones given.
  const std::string at_most_one = "Requires at most 1 options be given from [";
  if (starts_with(what, at_most_one) && ends_with(what, "]")) {
    std::vector<const CLI::Option*> given;
    std::string names, list = what.substr(at_most_one.size(), what.size() - at_most_one.size() - 1) + ",";
    for (std::size_t at = 0, next; (next = list.find(',', at)) != std::string::npos; at = next + 1) {
      const CLI::Option* option = find_option(command, list.substr(at, next - at));
      if (option == nullptr || option->count() == 0 || std::find(given.begin(), given.end(), option) != given.end()) continue;
      names += (given.empty() ? "" : " and ") + option->get_name();
      given.push_back(option);
    }
    if (given.size() > 1) return names + " cannot be used together";
  }
  const std::string required = " is required";
  if (ends_with(what, required)) {
    const std::string name = what.substr(0, what.size() - required.size());
    const CLI::Option* option = find_option(command, name);
    // CLI11 checks what is required before the words it could not read: a mistyped flag
    // ("tokens --dta x") would go unmentioned, and it may be the one the user meant to give.
    const std::string unread = unread_explained(app, command);
    return command_path(app) + " needs " + name + (option ? " (" + what_it_takes(*option) + ")" : std::string()) +
           (unread.empty() ? "" : "; and " + unread);
  }
  return what;
}

}  // namespace

std::string command_path(const CLI::App& app) {
  const CLI::App& command = chosen_command(app);
  return &command == &app ? app.get_name() : app.get_name() + " " + command.get_name();
}

std::string explain_parse_error(const CLI::App& app, const CLI::ParseError& error) {
  const CLI::App& command = chosen_command(app);
  const std::string what = error.what();
  if (dynamic_cast<const CLI::ConversionError*>(&error)) return explain_conversion(command, what);
  if (dynamic_cast<const CLI::ArgumentMismatch*>(&error)) return explain_mismatch(command, what);
  if (dynamic_cast<const CLI::ValidationError*>(&error)) return explain_validation(what);
  if (dynamic_cast<const CLI::RequiredError*>(&error)) return explain_required(app, command, what);
  if (dynamic_cast<const CLI::ExtrasError*>(&error)) {  // "The following argument was not expected: --bogus"
    const std::string unread = unread_explained(app, command);
    return unread.empty() ? what : unread;
  }
  // "--zero excludes --fsdp", "--offload requires --zero" (CLI11's excludes() and needs())
  if (dynamic_cast<const CLI::ExcludesError*>(&error))
    if (const auto pair = split(what, " excludes ")) return pair->first + " and " + pair->second + " cannot be used together";
  if (dynamic_cast<const CLI::RequiresError*>(&error))
    if (const auto pair = split(what, " requires ")) return pair->first + " needs " + pair->second;
  return what;  // FileError, ConfigError, InvalidError, HorribleError: not made by a command line of ours
}

}  // namespace trainmem::cli
