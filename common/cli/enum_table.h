// The names a flag takes for an enum, written once, in one table beside the enum. From the table
// come the parse, the name, the error text and (enum_flag.h) the flag's check and its type in --help:
//
//   enum class Loader { sequential, eager, lazy };
//   inline constexpr auto kLoaders = cli::enum_table<Loader>(
//       "--loader", {{Loader::sequential, "sequential"}, {Loader::eager, "eager"}, {Loader::lazy, "lazy"}});
//
//   kLoaders.parse("lazy")       Loader::lazy
//   kLoaders.parse("later")      throws std::invalid_argument:
//                                "--loader takes one of sequential, eager, lazy, not 'later'"
//   kLoaders.name(Loader::lazy)  "lazy"
//   kLoaders.choices()           "sequential|eager|lazy" (the flag's type in --help)
//
// The error text is the one parse_errors.h gives every flag whose value is none of its names.
// Header-only, the standard library only, and C++17: device.h, which .cu files include, uses it.
#pragma once
#include <cstddef>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

namespace trainmem::cli {

// One value of the enum and the name the flag takes for it.
template <typename E>
struct EnumName {
  E value{};  // (initialized, so that enum_table can build a table while compiling in C++17)
  std::string_view name;
};

template <typename E, std::size_t N>
struct EnumTable {
  std::string_view what;  // whose names these are, as the error names it: "--loader"
  EnumName<E> names[N];   // in the order --help and the error list them

  // The value named `text`; std::invalid_argument listing every name when it is none of them.
  E parse(std::string_view text) const {
    if (const std::optional<E> value = find(text)) return *value;
    throw std::invalid_argument(std::string(what) + " takes " + one_of() + ", not '" + std::string(text) + "'");
  }

  // The value named `text`, if one is (for a parse of its own that also takes other forms:
  // --recompute every:K).
  constexpr std::optional<E> find(std::string_view text) const {
    for (const EnumName<E>& n : names)
      if (n.name == text) return n.value;
    return std::nullopt;
  }

  // The name of `value` ("?" for a value the table does not list).
  constexpr std::string_view name(E value) const {
    for (const EnumName<E>& n : names)
      if (n.value == value) return n.name;
    return "?";
  }

  // The same names for another flag (or word) `what`: a table in common/ names its values, the
  // suite that declares the flag gives it its name (suites/zero: kOffloads.renamed("--offload")).
  constexpr EnumTable renamed(std::string_view flag) const {
    EnumTable table = *this;
    table.what = flag;
    return table;
  }
  // "sequential|eager|lazy": the flag's type in --help.
  std::string choices() const { return joined("|"); }

  // "one of sequential, eager, lazy": what the flag takes, in words.
  std::string one_of() const { return "one of " + joined(", "); }

  // The names with `separator` between them.
  std::string joined(std::string_view separator) const {
    std::string text;
    for (std::size_t i = 0; i < N; ++i) text += std::string(i == 0 ? "" : separator) + std::string(names[i].name);
    return text;
  }
};

// The table of the names `what` takes, their count taken from the list:
//   enum_table<Precision>("--precision", {{Precision::fp32, "fp32"}, ...})
template <typename E, std::size_t N>
constexpr EnumTable<E, N> enum_table(std::string_view what, const EnumName<E> (&names)[N]) {
  EnumTable<E, N> table{what, {}};
  for (std::size_t i = 0; i < N; ++i) table.names[i] = names[i];
  return table;
}

}  // namespace trainmem::cli
