// Sizes and counts computed from input, with overflow checks. One helper for the whole program:
// tensor sizes, allocator requests, token-file header counts and the estimator's products all go
// through it, so a value that would wrap around is refused with a message that names it and the
// limit, instead of silently becoming a small number.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <string_view>

namespace trainmem {

// The largest byte count (or element count) trainmem computes with: 2^62 = 4 EiB. The allocator's
// statistics (PyTorch's names, memory_stats.h) are signed 64-bit; a limit of 2^62 per size leaves
// room for rounding a request up to a segment and for adding one more size to a sum without wrapping.
constexpr std::uint64_t kMaxBytes = std::uint64_t{1} << 62;

// Input whose size would pass a limit. An input error (exit code 2): the message says which value,
// what it came to (or that it passed the limit), and the limit.
struct SizeLimitError : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

// "<what>: <detail> is more than the limit of <limit> (2^k)" — thrown by the helpers below.
[[noreturn]] void throw_size_limit(std::string_view what, std::string_view detail, std::uint64_t limit);

// a * b, or SizeLimitError if the product passes `limit`.
std::uint64_t checked_mul(std::uint64_t a, std::uint64_t b, std::string_view what, std::uint64_t limit = kMaxBytes);
// a + b, or SizeLimitError if the sum passes `limit`.
std::uint64_t checked_add(std::uint64_t a, std::uint64_t b, std::string_view what, std::uint64_t limit = kMaxBytes);
// The product of all factors (e.g. {B, H, T, T, 4} for the attention scores' bytes); the message
// lists every factor: "attention scores: 1048576 x 64 x 1048576 x 1048576 x 4 is more than ...".
std::uint64_t checked_product(std::initializer_list<std::uint64_t> factors, std::string_view what,
                              std::uint64_t limit = kMaxBytes);
// `value` itself, or SizeLimitError if it passes `limit` (e.g. a count read from a file header).
std::uint64_t checked_limit(std::uint64_t value, std::string_view what, std::uint64_t limit = kMaxBytes);

// "4611686018427387904 (2^62)" for a power of two, else the plain number.
std::string describe_limit(std::uint64_t limit);

}  // namespace trainmem
