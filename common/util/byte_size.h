// Byte sizes as people write them: parse "16GiB", "512MiB", "1.5GB", "4096" and print them back.
#pragma once
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace trainmem {

constexpr std::size_t KiB = 1024;
constexpr std::size_t MiB = 1024 * KiB;
constexpr std::size_t GiB = 1024 * MiB;

// Thrown for a size string that cannot be read, or that is more than 64 bits hold; the message
// says what is accepted.
struct ByteSizeError : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

// A number (whole, or with a decimal fraction that makes whole bytes) and an optional unit, read
// exactly (no rounding through a double). The units, case-insensitive, are one list (byte_size.cpp),
// which byte_size_units() writes out for help texts: B; KiB or K, MiB or M, ... EiB or E, powers of
// 1024; KB, MB, ... EB, powers of 1000 (as disk makers and `nvidia-smi` use them); no unit: bytes.
// A size above 2^64 - 1 bytes is refused, never clamped.
std::size_t parse_byte_size(std::string_view text);

// The names of the units parse_byte_size accepts, as byte_size_units() lists them.
std::vector<std::string_view> byte_size_unit_names();

// The units parse_byte_size accepts, for help texts and messages: "B, KiB/K, MiB/M, ... (powers
// of 1024), KB, MB, ... (powers of 1000), in any case: 24G = 24GiB = 25769803776 bytes, 24GB =
// 24gb = 24000000000 bytes" (a one-letter unit is binary; GB is not GiB).
std::string byte_size_units();

// A size as parse_byte_size reads it back exactly, in the largest binary unit that divides it:
// "1MiB", "4EiB", "1536KiB", "1000B".
std::string exact_byte_size(std::uint64_t bytes);

// Human-readable, as PyTorch's format_size does: bytes below 1 KiB, else KiB/MiB/GiB with two
// decimals, e.g. "20.00 MiB"; from 1 TiB on, TiB/PiB/EiB ("4.31 TiB").
std::string format_bytes(std::uint64_t bytes);

}  // namespace trainmem
