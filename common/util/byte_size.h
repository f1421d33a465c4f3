// Byte sizes as people write them: parse "16GiB", "512MiB", "1.5GB", "4096" and print them back.
#pragma once
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

namespace trainmem {

constexpr std::size_t KiB = 1024;
constexpr std::size_t MiB = 1024 * KiB;
constexpr std::size_t GiB = 1024 * MiB;

// Thrown for a size string that cannot be read; the message says what is accepted.
struct ByteSizeError : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

// Binary suffixes K/KiB, M/MiB, G/GiB, T/TiB are powers of 1024; KB, MB, GB, TB are powers of
// 1000 (as disk makers and `nvidia-smi` use them); "B" or no suffix means bytes. Case-insensitive.
std::size_t parse_byte_size(std::string_view text);

// Human-readable, as PyTorch's format_size does: bytes below 1 KiB, else KiB/MiB/GiB with two
// decimals, e.g. "20.00 MiB".
std::string format_bytes(std::uint64_t bytes);

}  // namespace trainmem
