// A flag that takes one name of an enum's table (enum_table.h). Its type in --help is the table's
// names, and a word that is none of them is a one-line parse error, the table's own:
//
//   --loader sequential|eager|lazy=sequential
//                               Where the dataset lives: ...
//   trainmem: error: --loader takes one of sequential, eager, lazy, not 'later'
#pragma once
#include <CLI/CLI.hpp>

#include <cstddef>
#include <string>

#include "common/cli/enum_table.h"
#include "common/cli/flag_ranges.h"

namespace trainmem::cli {

// Gives `option`, a flag that takes a text, the table's names as its type in --help and the
// table's parse as its check.
template <typename E, std::size_t N>
CLI::Option* takes_one_of(CLI::Option* option, const EnumTable<E, N>& table) {
  return option->type_name(table.choices())->check(parses_with([&table](const std::string& text) { table.parse(text); }));
}

// The table's flag (table.what), storing the value named in `value`; the value `value` holds now
// is the default --help shows.
template <typename E, std::size_t N>
CLI::Option* add_enum_flag(CLI::App& command, const EnumTable<E, N>& table, E& value, const std::string& help) {
  CLI::Option* option = command.add_option_function<std::string>(
      std::string(table.what), [&table, &value](const std::string& text) { value = table.parse(text); }, help);
  return takes_one_of(option, table)->default_str(std::string(table.name(value)));
}

}  // namespace trainmem::cli
