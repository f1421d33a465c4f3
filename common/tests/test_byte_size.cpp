#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>

#include "common/util/byte_size.h"

namespace trainmem {
namespace {

constexpr std::uint64_t kMax = std::numeric_limits<std::uint64_t>::max();

// The message of the ByteSizeError `text` raises ("" if it raises none).
std::string refusal(const std::string& text) {
  try {
    parse_byte_size(text);
    return "";
  } catch (const ByteSizeError& e) {
    return e.what();
  }
}

TEST(ByteSize, ParsesBinaryAndDecimalUnits) {
  EXPECT_EQ(parse_byte_size("4096"), 4096u);
  EXPECT_EQ(parse_byte_size("512B"), 512u);
  EXPECT_EQ(parse_byte_size("16GiB"), 16 * GiB);
  EXPECT_EQ(parse_byte_size("16G"), 16 * GiB);
  EXPECT_EQ(parse_byte_size("512MiB"), 512 * MiB);
  EXPECT_EQ(parse_byte_size("1.5GiB"), 3 * GiB / 2);
  EXPECT_EQ(parse_byte_size("80GB"), 80'000'000'000u);
  EXPECT_EQ(parse_byte_size("2 kib"), 2048u);
}

// A one-letter unit is binary and a two-letter one decimal, in any case: 24G = 24GiB, 24GB =
// 24gb, 7% less. The text every size's --help shows says so, in bytes.
TEST(ByteSize, GIsGiBAndGBIsDecimalAndTheHelpSaysSo) {
  EXPECT_EQ(parse_byte_size("24G"), 24 * GiB);
  EXPECT_EQ(parse_byte_size("24g"), parse_byte_size("24GiB"));
  EXPECT_EQ(parse_byte_size("24gib"), parse_byte_size("24GiB"));
  EXPECT_EQ(parse_byte_size("24gb"), 24'000'000'000u);
  EXPECT_EQ(parse_byte_size("24Gb"), parse_byte_size("24GB"));
  const std::string units = byte_size_units();
  EXPECT_NE(units.find("24G = 24GiB = 25769803776 bytes"), std::string::npos) << units;
  EXPECT_NE(units.find("24GB = 24gb = 24000000000 bytes"), std::string::npos) << units;
}

// --help named 4EiB as --device-memory's limit, and the parser knew no unit past TiB.
TEST(ByteSize, ParsesPetaAndExaUnits) {
  EXPECT_EQ(parse_byte_size("1PiB"), std::uint64_t{1} << 50);
  EXPECT_EQ(parse_byte_size("3P"), std::uint64_t{3} << 50);
  EXPECT_EQ(parse_byte_size("4EiB"), std::uint64_t{1} << 62);
  EXPECT_EQ(parse_byte_size("15e"), std::uint64_t{15} << 60);
  EXPECT_EQ(parse_byte_size("2PB"), 2'000'000'000'000'000u);
  EXPECT_EQ(parse_byte_size("18EB"), 18'000'000'000'000'000'000u);
  EXPECT_EQ(parse_byte_size("0.5EiB"), std::uint64_t{1} << 59);
}

// Every unit the help lists is read, and read as what the list says it is.
TEST(ByteSize, EveryUnitTheHelpNamesIsAccepted) {
  const std::string listed = byte_size_units();
  for (const std::string_view name : byte_size_unit_names()) {
    SCOPED_TRACE(std::string(name));
    EXPECT_NE(listed.find(name), std::string::npos) << listed;
    std::string one_unit = "1";
    one_unit += name;
    const std::uint64_t one = parse_byte_size(one_unit);
    const bool binary = name.size() == 1 || name.find('i') != std::string_view::npos;
    const int power = name == "B" ? 0 : static_cast<int>(std::string_view("BKMGTPE").find(name.front()));
    std::uint64_t expected = 1;
    for (int i = 0; i < power; ++i) expected *= binary ? 1024 : 1000;
    EXPECT_EQ(one, expected);
  }
  EXPECT_NE(listed.find("EiB"), std::string::npos);
  EXPECT_NE(listed.find("PB"), std::string::npos);
}

// A double keeps 53 bits: 2^62 + 1 was read as 2^62, and 2^64 - 1 as "cannot read".
TEST(ByteSize, LargeSizesAreReadExactly) {
  EXPECT_EQ(parse_byte_size("4611686018427387905"), (std::uint64_t{1} << 62) + 1);
  EXPECT_EQ(parse_byte_size("9007199254740993"), 9007199254740993u);
  EXPECT_EQ(parse_byte_size("18446744073709551615"), kMax);
  EXPECT_EQ(parse_byte_size("18446744073709551615B"), kMax);
  EXPECT_EQ(parse_byte_size("0.000000000000000001EB"), 1u);
  EXPECT_EQ(parse_byte_size("15.9375EiB"), kMax - ((std::uint64_t{1} << 56) - 1));  // 2^64 - 2^56
}

TEST(ByteSize, SizesPast64BitsAreRefusedNotClamped) {
  for (const char* too_large : {"18446744073709551616", "16EiB", "16E", "18.5EB", "99999999999999999999999KiB",
                                "17179869184GiB", "16.0EiB"}) {
    SCOPED_TRACE(too_large);
    const std::string message = refusal(too_large);
    EXPECT_NE(message.find("does not fit in 64 bits: the largest size is 18446744073709551615 bytes"), std::string::npos)
        << message;
  }
}

TEST(ByteSize, RejectsWhatItCannotRead) {
  for (const char* bad : {"", "GiB", "12 parsecs", "-1GiB", "1.2.3", "0.3B", ".", "1ZiB", "0.1KiB"})
    EXPECT_THROW(parse_byte_size(bad), ByteSizeError) << bad;
  EXPECT_NE(refusal("0.3B").find("not a whole number of bytes"), std::string::npos);
  EXPECT_NE(refusal("1ZiB").find(byte_size_units()), std::string::npos);  // the message lists the units
}

TEST(ByteSize, ExactSizesReadBack) {
  EXPECT_EQ(exact_byte_size(std::uint64_t{1} << 20), "1MiB");
  EXPECT_EQ(exact_byte_size(std::uint64_t{1} << 62), "4EiB");
  EXPECT_EQ(exact_byte_size(1536 * KiB), "1536KiB");
  EXPECT_EQ(exact_byte_size(1000), "1000B");
  EXPECT_EQ(exact_byte_size(0), "0B");
  for (const std::uint64_t bytes : {std::uint64_t{1} << 62, std::uint64_t{3} << 50, std::uint64_t{1000}, kMax})
    EXPECT_EQ(parse_byte_size(exact_byte_size(bytes)), bytes);
}

TEST(ByteSize, FormatsLikePyTorch) {
  EXPECT_EQ(format_bytes(100), "100 bytes");
  EXPECT_EQ(format_bytes(1536), "1.50 KiB");
  EXPECT_EQ(format_bytes(20 * MiB), "20.00 MiB");
  EXPECT_EQ(format_bytes(16 * GiB), "16.00 GiB");
  // Issue 40, item 8: "4516419.50 GiB" reads better as 4.31 PiB.
  EXPECT_EQ(format_bytes(1023 * GiB), "1023.00 GiB");
  EXPECT_EQ(format_bytes(1024 * GiB), "1.00 TiB");
  EXPECT_EQ(format_bytes(static_cast<std::uint64_t>(4516419.5 * GiB)), "4.31 PiB");
  EXPECT_EQ(format_bytes(std::uint64_t{1} << 62), "4.00 EiB");
  EXPECT_EQ(format_bytes(~std::uint64_t{0}), "16.00 EiB");
}

}  // namespace
}  // namespace trainmem
