#include "common/cli/output_flags.h"

#include <filesystem>
#include <vector>

namespace trainmem::cli {

namespace {

// The help heading of the output flags, and how they are told from the others.
const char* const kOutputFiles = "Output files";

// The file `path` names: absolute, with ".", ".." and the symbolic links of the folders that exist
// resolved, so that "run.json" and "./run.json" are one file. As given when that fails.
std::filesystem::path resolved(const std::string& path) {
  std::error_code error;
  const std::filesystem::path absolute = std::filesystem::absolute(path, error);
  if (error) return path;
  const std::filesystem::path canonical = std::filesystem::weakly_canonical(absolute, error);
  return error ? absolute.lexically_normal() : canonical;
}

}  // namespace

CLI::Option* add_output_flag(CLI::App& command, const std::string& name, std::string& path, const std::string& help) {
  return command.add_option(name, path, help)
      ->type_name("FILE")
      ->group(kOutputFiles)
      ->check(CLI::Validator(
          [](const std::string& text) {
            return text.empty() ? std::string("needs the path of the file to write; an empty path names no file")
                                : std::string();
          },
          ""));
}

bool is_output_flag(const CLI::Option& option) { return option.get_group() == kOutputFiles; }

void check_distinct_output_files(const CLI::App& command) {
  struct Given {
    const CLI::Option* flag;
    std::string path;
    std::filesystem::path file;
  };
  std::vector<Given> given;
  for (const CLI::Option* option : command.get_options()) {
    if (!is_output_flag(*option) || option->count() == 0) continue;
    const Given mine{option, option->as<std::string>(), resolved(option->as<std::string>())};
    for (const Given& other : given) {
      if (mine.file != other.file) continue;
      const std::string both = other.path == mine.path
                                   ? other.flag->get_name() + " and " + mine.flag->get_name() + " both name the file " + mine.path
                                   : other.flag->get_name() + " " + other.path + " and " + mine.flag->get_name() + " " +
                                         mine.path + " name the same file";
      throw CLI::ValidationError(both + ": give each its own (one would overwrite the other)");
    }
    given.push_back(mine);
  }
}

}  // namespace trainmem::cli
