#include <gtest/gtest.h>

#include <array>

#include "common/allocator/allocator_config.h"

namespace trainmem {
namespace {

TEST(AllocatorConfig, DefaultsAreCachingWithUnlimitedSplits) {
  const AllocatorConfig c = AllocatorConfig::parse("");
  EXPECT_EQ(c.backend, AllocatorConfig::Backend::caching);
  EXPECT_EQ(c.max_split_size, kNoMaxSplit);
  EXPECT_FALSE(c.expandable_segments);
}

TEST(AllocatorConfig, ParsesPyTorchStyleKeyValueLists) {
  const AllocatorConfig c = AllocatorConfig::parse("max_split_size_mb:128, backend:native,expandable_segments:False");
  EXPECT_EQ(c.max_split_size, 128 * MiB);
  EXPECT_EQ(c.backend, AllocatorConfig::Backend::caching);
  EXPECT_EQ(AllocatorConfig::parse("backend:raw").backend, AllocatorConfig::Backend::raw);
  EXPECT_EQ(AllocatorConfig::parse(c.to_string()), c);
  const AllocatorConfig e = AllocatorConfig::parse("expandable_segments:True");
  EXPECT_TRUE(e.expandable_segments);
  EXPECT_EQ(e.to_string(), "backend:caching,expandable_segments:True");
  EXPECT_EQ(AllocatorConfig::parse(e.to_string()), e);
}

// A label names what differs from the default, in to_string's words, and parses back to the config.
TEST(AllocatorConfig, ALabelIsWhatDiffersFromTheDefault) {
  EXPECT_EQ(AllocatorConfig{}.label(), "default");
  EXPECT_EQ(AllocatorConfig::parse("expandable_segments:False,backend:native").label(), "default");
  for (const char* text : {"expandable_segments:True", "backend:raw,max_split_size_mb:20", "roundup_power2_divisions:4",
                           "max_split_size_mb:128,garbage_collection_threshold:0.6",
                           "roundup_power2_divisions:[1:4,2:8,4:4,8:4,16:4,32:4,64:4,128:4,256:4,512:4,1024:4,2048:4,"
                           "4096:4,8192:4,16384:4,32768:4]"}) {
    const AllocatorConfig c = AllocatorConfig::parse(text);
    EXPECT_EQ(c.label(), text);
    EXPECT_EQ(AllocatorConfig::parse(c.label()), c) << text;
  }
}

// What parse says of `text`: its error's message, or "no error".
std::string message_of(const char* text) {
  try {
    AllocatorConfig::parse(text);
  } catch (const AllocatorConfigError& e) {
    return std::string(e.what());
  }
  return std::string("no error");
}

TEST(AllocatorConfig, RejectsWhatItCannotDoWithAMessage) {
  EXPECT_NE(message_of("max_split_size_mb:10").find("at least 20"), std::string::npos);
  EXPECT_NE(message_of("max_split_size_mb:lots").find("whole number"), std::string::npos);
  EXPECT_NE(message_of("colour:blue").find("unknown key 'colour'"), std::string::npos);
  EXPECT_NE(message_of("backend:cudaMallocAsync").find("takes one of caching, raw, not 'cudaMallocAsync'"), std::string::npos);
  EXPECT_NE(message_of("max_split_size_mb").find("key:value"), std::string::npos);
  EXPECT_NE(message_of("expandable_segments:maybe").find("True or False"), std::string::npos);
  EXPECT_NE(message_of("backend:raw,expandable_segments:True").find("needs backend:caching"), std::string::npos);
}

// roundup_power2_divisions as PyTorch reads it: one count for every interval, or a list by the
// intervals' starts in MiB (the first entry also covers those below it, ">" those after the last).
TEST(AllocatorConfig, RoundupPowerOfTwoDivisionsInBothForms) {
  std::array<std::size_t, kRoundupIntervals> all4{};
  all4.fill(4);
  EXPECT_EQ(AllocatorConfig::parse("roundup_power2_divisions:4").roundup_power2_divisions, all4);
  // [256:1,512:2,1024:4,>:8]: intervals 0..8 (1 MiB to 256 MiB) plain, 9 (512 MiB) 2, 10 (1 GiB) 4,
  // 11..15 8.
  const AllocatorConfig list = AllocatorConfig::parse("max_split_size_mb:64,roundup_power2_divisions:[256:1,512:2,1024:4,>:8]");
  std::array<std::size_t, kRoundupIntervals> expected{};
  expected[9] = 2;
  expected[10] = 4;
  for (std::size_t i = 11; i < kRoundupIntervals; ++i) expected[i] = 8;
  EXPECT_EQ(list.roundup_power2_divisions, expected);
  EXPECT_EQ(list.max_split_size, 64 * MiB);  // the list's commas are its own
  EXPECT_EQ(AllocatorConfig::parse(list.to_string()), list);
  EXPECT_EQ(AllocatorConfig::parse(AllocatorConfig::parse("roundup_power2_divisions:8").to_string()).roundup_power2_divisions[3], 8u);
  EXPECT_EQ(AllocatorConfig::parse("roundup_power2_divisions:1"), AllocatorConfig{});  // 1: 512 B rounding, the default
  const AllocatorConfig gc = AllocatorConfig::parse("garbage_collection_threshold:0.6");
  EXPECT_EQ(gc.garbage_collection_threshold, 0.6);
  EXPECT_EQ(gc.to_string(), "backend:caching,expandable_segments:False,garbage_collection_threshold:0.6");
  EXPECT_EQ(AllocatorConfig::parse(gc.to_string()), gc);
  EXPECT_NE(message_of("roundup_power2_divisions:3").find("must be a power of two"), std::string::npos);
  EXPECT_NE(message_of("roundup_power2_divisions:[300:2]").find("the interval 300 MiB is not a power of two"), std::string::npos);
  EXPECT_NE(message_of("roundup_power2_divisions:[256:2").find("lacks its ']'"), std::string::npos);
  EXPECT_NE(message_of("roundup_power2_divisions:[256]").find("is not MB:N"), std::string::npos);
  EXPECT_NE(message_of("garbage_collection_threshold:1.5").find("between 0 and 1"), std::string::npos);
  EXPECT_NE(message_of("garbage_collection_threshold:0").find("between 0 and 1"), std::string::npos);
}

// PyTorch's round_size with divisions, worked by hand.
TEST(AllocatorConfig, RoundingToPowerOfTwoDivisions) {
  const AllocatorConfig four = AllocatorConfig::parse("roundup_power2_divisions:4");
  EXPECT_EQ(round_request(100, four), 512u);                   // below 512: 512
  EXPECT_EQ(round_request(1500, four), 1536u);                 // not above 512 x 4: plain rounding
  EXPECT_EQ(round_request(3000, four), 3072u);                 // 2048 + steps of 512
  EXPECT_EQ(round_request(4096, four), 4096u);                 // a power of two stays
  EXPECT_EQ(round_request(MiB + MiB / 5, four), MiB + MiB / 4);  // 1 MiB + steps of 256 KiB
  EXPECT_EQ(round_request(5 * MiB + 1, four), 6 * MiB);        // 4 MiB + steps of 1 MiB
  EXPECT_EQ(round_request(5 * MiB, four), 5 * MiB);            // already on a step
  const AllocatorConfig eight = AllocatorConfig::parse("roundup_power2_divisions:8");
  EXPECT_EQ(round_request(5 * MiB + 1, eight), 5 * MiB + MiB / 2);  // 4 MiB + steps of 512 KiB
  const AllocatorConfig plain;
  for (std::size_t n : {std::size_t{1}, std::size_t{513}, std::size_t{3000}, 5 * MiB + 1})
    EXPECT_EQ(round_request(n, plain), round_size(n));
}

}  // namespace
}  // namespace trainmem
