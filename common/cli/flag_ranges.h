// The checks of the flags every command and every technique registers (common/train/technique.h).
//
// Every numeric flag has a stated valid range, checked on the text as given, with a message in
// plain numbers:
//
//   trainmem: error: --batch: must be at least 1, not 0.
//   trainmem: error: --lr: must be a finite number, not 'nan'.
//
// (CLI11's own range checks print the limits of a double, a 309-digit number, and accept nan.)
#pragma once
#include <CLI/CLI.hpp>

#include <cstdint>
#include <stdexcept>
#include <string>

namespace trainmem::cli {

// A whole number in [min, max]. Also refuses a sign, a fraction, hex and text.
CLI::Validator whole_number(std::uint64_t min, std::uint64_t max);

// A finite real number between `min` and `max`; each bound is included or not.
enum class Bound { inclusive, exclusive };
CLI::Validator real_number(double min, Bound min_bound, double max, Bound max_bound);

// A CLI11 check from a parse function that throws std::invalid_argument (sizes, allocator
// configs, recompute policies): "" when `parse(text)` accepts the text, else its message, which
// CLI11 turns into the one-line error "--flag: message".
template <typename Parse>
CLI::Validator parses_with(Parse parse) {
  return CLI::Validator(
      [parse](std::string& text) {
        try {
          parse(text);
          return std::string();
        } catch (const std::invalid_argument& e) {
          return std::string(e.what());
        }
      },
      "");
}


}  // namespace trainmem::cli
