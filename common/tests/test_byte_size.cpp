#include <gtest/gtest.h>

#include "common/util/byte_size.h"

namespace trainmem {
namespace {

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

TEST(ByteSize, RejectsWhatItCannotRead) {
  for (const char* bad : {"", "GiB", "12 parsecs", "-1GiB", "1.2.3", "0.3B"})
    EXPECT_THROW(parse_byte_size(bad), ByteSizeError) << bad;
}

TEST(ByteSize, FormatsLikePyTorch) {
  EXPECT_EQ(format_bytes(100), "100 bytes");
  EXPECT_EQ(format_bytes(1536), "1.50 KiB");
  EXPECT_EQ(format_bytes(20 * MiB), "20.00 MiB");
  EXPECT_EQ(format_bytes(16 * GiB), "16.00 GiB");
}

}  // namespace
}  // namespace trainmem
