#include "common/cli/flag_ranges.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace trainmem::cli {

namespace {

std::string trimmed(const std::string& text) {
  const auto first = text.find_first_not_of(" \t");
  if (first == std::string::npos) return "";
  const auto last = text.find_last_not_of(" \t");
  return text.substr(first, last - first + 1);
}

// %g: 1e-08, 0.5, 3.40282e+38 — short, and never the 309 digits of a double's limit.
std::string plain(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", x);
  return buf;
}

// The range as the help and the messages write it: "1 to 4096".
std::string describe_whole_range(std::uint64_t min, std::uint64_t max) {
  return std::to_string(min) + " to " + std::to_string(max);
}

}  // namespace

CLI::Validator whole_number(std::uint64_t min, std::uint64_t max) {
  const std::string range = describe_whole_range(min, max);
  return CLI::Validator(
      [min, max, range](std::string& text) -> std::string {
        const std::string t = trimmed(text);
        const bool negative = !t.empty() && t.front() == '-';
        const std::string digits = !t.empty() && (t.front() == '-' || t.front() == '+') ? t.substr(1) : t;
        if (digits.empty() || digits.find_first_not_of("0123456789") != std::string::npos)
          return "must be a whole number from " + range + ", not '" + text + "'";
        const bool zero = digits.find_first_not_of('0') == std::string::npos;
        if (negative && !zero) return "must be at least " + std::to_string(min) + ", not " + t;
        std::uint64_t value = 0;
        const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
        if (error == std::errc::result_out_of_range || value > max)
          return "must be at most " + std::to_string(max) + ", not " + t;
        if (value < min) return "must be at least " + std::to_string(min) + ", not " + t;
        text = digits;  // CLI11 converts what is left: no sign, no spaces
        return "";
      },
      range);
}

CLI::Validator real_number(double min, Bound min_bound, double max, Bound max_bound, const RealType& stored) {
  if (max > stored.largest) {  // at most what the type holds
    max = stored.largest;
    max_bound = Bound::inclusive;
  }
  const bool min_in = min_bound == Bound::inclusive, max_in = max_bound == Bound::inclusive;
  const std::string lower = (min_in ? "at least " : "greater than ") + plain(min);
  const std::string upper = (max_in ? "at most " : "less than ") + plain(max);
  return CLI::Validator(
      [=](std::string& text) -> std::string {
        const std::string t = trimmed(text);
        char* end = nullptr;
        const double value = std::strtod(t.c_str(), &end);
        if (t.empty() || end != t.c_str() + t.size()) return "must be a number " + lower + " and " + upper + ", not '" + text + "'";
        if (!std::isfinite(value)) return "must be a finite number, not '" + t + "'";
        if (min_in ? value < min : value <= min) return "must be " + lower + ", not " + t;
        if (max_in ? value > max : value >= max) return "must be " + upper + ", not " + t;
        if (value != 0 && std::fabs(value) < stored.smallest)  // 0 or a denormal once narrowed
          return "must be " + lower + " and " + upper + ", not " + t + ", which " + stored.name +
                 " cannot hold (the smallest it holds in full precision is " + plain(stored.smallest) + ")";
        text = t;  // CLI11 converts what is left: no spaces
        return "";
      },
      lower + ", " + upper);
}

}  // namespace trainmem::cli
