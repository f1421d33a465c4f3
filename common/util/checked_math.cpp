#include "common/util/checked_math.h"

#include <bit>

namespace trainmem {

std::string describe_limit(std::uint64_t limit) {
  std::string s = std::to_string(limit);
  if (std::has_single_bit(limit)) s += " (2^" + std::to_string(std::countr_zero(limit)) + ")";
  return s;
}

void throw_size_limit(std::string_view what, std::string_view detail, std::uint64_t limit) {
  std::string message(what);
  message += ": ";
  message += detail;
  message += " is more than the limit of ";
  message += describe_limit(limit);
  throw SizeLimitError(message);
}

std::uint64_t checked_mul(std::uint64_t a, std::uint64_t b, std::string_view what, std::uint64_t limit) {
  std::uint64_t product = 0;
  if (__builtin_mul_overflow(a, b, &product) || product > limit)
    throw_size_limit(what, std::to_string(a) + " x " + std::to_string(b), limit);
  return product;
}

std::uint64_t checked_add(std::uint64_t a, std::uint64_t b, std::string_view what, std::uint64_t limit) {
  std::uint64_t sum = 0;
  if (__builtin_add_overflow(a, b, &sum) || sum > limit)
    throw_size_limit(what, std::to_string(a) + " + " + std::to_string(b), limit);
  return sum;
}

std::uint64_t checked_product(std::initializer_list<std::uint64_t> factors, std::string_view what,
                              std::uint64_t limit) {
  std::uint64_t product = 1;
  bool passed = false;
  for (std::uint64_t f : factors) {
    if (f == 0) return 0;  // a zero factor makes any product 0, whatever came before
    if (__builtin_mul_overflow(product, f, &product) || product > limit) passed = true;
  }
  if (passed) {
    std::string detail;
    for (std::uint64_t f : factors) detail += (detail.empty() ? "" : " x ") + std::to_string(f);
    throw_size_limit(what, detail, limit);
  }
  return product;
}

std::uint64_t checked_limit(std::uint64_t value, std::string_view what, std::uint64_t limit) {
  if (value > limit) throw_size_limit(what, std::to_string(value), limit);
  return value;
}

}  // namespace trainmem
