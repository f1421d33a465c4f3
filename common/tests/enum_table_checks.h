// What every enum table (common/cli/enum_table.h) must do, checked by the tests of the table's
// owner (common/tests/test_enum_table.cpp for common's tables, each suite's test for its own):
//
//   parse(name(e)) == e for every value of the table, each value listed once;
//   an unknown word's error is "WHAT takes one of a, b, c, not 'WORD'", listing every name;
//   the help's type (choices()) is "a|b|c", every name.
#pragma once
#include <gtest/gtest.h>

#include <cstddef>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/cli/enum_table.h"

namespace trainmem::testing_support {

// `text` cut at each `separator`: "a, b" -> {"a", "b"}.
inline std::vector<std::string> split_at(const std::string& text, const std::string& separator) {
  std::vector<std::string> parts;
  std::size_t from = 0;
  for (std::size_t at; (at = text.find(separator, from)) != std::string::npos; from = at + separator.size())
    parts.push_back(text.substr(from, at - from));
  parts.push_back(text.substr(from));
  return parts;
}

template <typename E, std::size_t N>
void expect_whole_table(const cli::EnumTable<E, N>& table) {
  SCOPED_TRACE(std::string(table.what));
  std::vector<std::string> names;
  for (const cli::EnumName<E>& n : table.names) {
    names.emplace_back(n.name);
    EXPECT_FALSE(n.name.empty());
    EXPECT_EQ(table.name(n.value), n.name) << "a value listed twice";
    EXPECT_EQ(table.parse(table.name(n.value)), n.value) << n.name;
  }

  const std::string word = "no-such-name";
  std::string error = "no error";
  try {
    table.parse(word);
  } catch (const std::invalid_argument& e) {
    error = e.what();
  }
  const std::string head = std::string(table.what) + " takes one of ", tail = ", not '" + word + "'";
  ASSERT_EQ(error.rfind(head, 0), 0u) << error;
  ASSERT_GE(error.size(), head.size() + tail.size()) << error;
  ASSERT_EQ(error.substr(error.size() - tail.size()), tail) << error;
  EXPECT_EQ(split_at(error.substr(head.size(), error.size() - head.size() - tail.size()), ", "), names) << error;

  EXPECT_EQ(split_at(table.choices(), "|"), names) << table.choices();
}

}  // namespace trainmem::testing_support
