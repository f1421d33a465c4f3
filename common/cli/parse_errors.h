// CLI11's parse errors in the program's words. CLI11 writes "--steps: At Most 1 required but
// received 2" or "Could not convert: --pinned = maybe"; the user reads which flag, what was given
// and what is accepted:
//
//   --steps is given 2 times; give it once
//   --pinned takes on|off (or true/false, yes/no, 1/0), not 'maybe'
//   --zero and --fsdp cannot be used together
//
// Every kind of CLI::ParseError is handled (see the .cpp for the kinds and their texts); one this
// does not know keeps CLI11's text. The checks of our own validators (flag_ranges.h) already say
// what they need to and pass through unchanged.
#pragma once
#include <CLI/CLI.hpp>

#include <string>

namespace trainmem::cli {

// The one-line explanation of `error`, thrown by `app.parse` (the program; the subcommand chosen,
// if any, is read from it). Without "error: " and without the pointer to --help.
std::string explain_parse_error(const CLI::App& app, const CLI::ParseError& error);

// "trainmem" or "trainmem train": the command whose --help has the flags `error` is about.
std::string command_path(const CLI::App& app);

}  // namespace trainmem::cli
