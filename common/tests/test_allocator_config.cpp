#include <gtest/gtest.h>

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

TEST(AllocatorConfig, RejectsWhatItCannotDoWithAMessage) {
  auto message_of = [](const char* text) {
    try {
      AllocatorConfig::parse(text);
    } catch (const AllocatorConfigError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message_of("max_split_size_mb:10").find("at least 20"), std::string::npos);
  EXPECT_NE(message_of("max_split_size_mb:lots").find("whole number"), std::string::npos);
  EXPECT_NE(message_of("colour:blue").find("unknown key 'colour'"), std::string::npos);
  EXPECT_NE(message_of("backend:cudaMallocAsync").find("takes one of caching, raw, not 'cudaMallocAsync'"), std::string::npos);
  EXPECT_NE(message_of("max_split_size_mb").find("key:value"), std::string::npos);
  EXPECT_NE(message_of("expandable_segments:maybe").find("True or False"), std::string::npos);
  EXPECT_NE(message_of("backend:raw,expandable_segments:True").find("needs backend:caching"), std::string::npos);
}

}  // namespace
}  // namespace trainmem
