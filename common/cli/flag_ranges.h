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
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>

namespace trainmem::cli {

// A whole number in [min, max]. Also refuses a sign, a fraction, hex and text.
CLI::Validator whole_number(std::uint64_t min, std::uint64_t max);

// A finite real number between `min` and `max`; each bound is included or not. `Stored` is the
// type the flag's variable has (float or double): the text is checked as a double, before CLI11
// narrows it, and a value that type cannot hold is refused — above its largest value, or so close
// to 0 that it would be stored as 0 or as a denormal ("--lr 1e-50" would train with a rate of 0):
//
//   trainmem: error: --lr: must be greater than 0 and at most 3.40282e+38, not 1e-50, which a float
//   cannot hold (the smallest it holds in full precision is 1.17549e-38)
enum class Bound { inclusive, exclusive };
constexpr double kNoMax = std::numeric_limits<double>::infinity();  // up to the largest value of the type
struct RealType {
  const char* name;  // "a float"
  double smallest;   // the smallest normal value, std::numeric_limits::min()
  double largest;
};
CLI::Validator real_number(double min, Bound min_bound, double max, Bound max_bound, const RealType& stored);
template <typename Stored>
CLI::Validator real_number(double min, Bound min_bound, double max, Bound max_bound) {
  static_assert(std::is_same_v<Stored, float> || std::is_same_v<Stored, double>, "a float or double flag");
  const RealType stored{std::is_same_v<Stored, float> ? "a float" : "a double",
                        static_cast<double>(std::numeric_limits<Stored>::min()),
                        static_cast<double>(std::numeric_limits<Stored>::max())};
  return real_number(min, min_bound, max, max_bound, stored);
}

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
