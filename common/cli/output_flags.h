// Flags that name a file the command writes (--json, --record-memory, --memory-snapshot, --out,
// --record). Declared with add_output_flag, they are listed under "Output files" in --help, and
// checked while parsing, the same way for every command:
//
//   trainmem: error: --json: needs the path of the file to write; an empty path names no file
//   trainmem: error: --json and --record-memory both name the file run.json: give each its own (one
//   would overwrite the other)
//
// (An empty path wrote nothing and exited 0; two flags naming one file kept only the last written.)
#pragma once
#include <CLI/CLI.hpp>

#include <string>

namespace trainmem::cli {

// --name FILE, stored in `path` (empty while not given). A given path that is empty is refused.
CLI::Option* add_output_flag(CLI::App& command, const std::string& name, std::string& path, const std::string& help);

// Whether `option` was declared by add_output_flag.
bool is_output_flag(const CLI::Option& option);

// Refuses two output flags of `command` that name the same file (after ".", "..", symbolic links
// and relative paths are resolved): CLI::ValidationError naming both flags.
void check_distinct_output_files(const CLI::App& command);

}  // namespace trainmem::cli
