// The token file format, byte tokenization, the synthetic corpus, and their error messages.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>

#include "common/data/token_file.h"
#include "common/tests/error_of.h"

namespace trainmem {
namespace {

std::string temp(const char* name) { return ::testing::TempDir() + "/" + name; }

std::string error_of(const std::function<void()>& f) { return testing_support::error_of<DataError>(f); }

TEST(TokenFile, RoundTripsRandomTokens) {
  std::mt19937 rng(3);
  std::vector<std::uint16_t> tokens(12345);
  for (auto& t : tokens) t = static_cast<std::uint16_t>(rng());
  const std::string path = temp("roundtrip.tok");
  write_token_file(path, tokens);
  EXPECT_EQ(std::filesystem::file_size(path), 32u + 2 * tokens.size());
  EXPECT_EQ(read_token_file(path), tokens);
}

TEST(TokenFile, TruncatedWrongMagicAndWrongVersionAreClearErrors) {
  const std::string path = temp("bad.tok");
  write_token_file(path, std::vector<std::uint16_t>(100, 7));
  std::filesystem::resize_file(path, 32 + 150);
  EXPECT_NE(error_of([&] { read_token_file(path); }).find("truncated"), std::string::npos);

  std::ofstream(path, std::ios::binary) << "hello, this is not a token file at all";
  EXPECT_NE(error_of([&] { read_token_file(path); }).find("wrong magic"), std::string::npos);

  std::ofstream(path, std::ios::binary) << "TMTO";
  EXPECT_NE(error_of([&] { read_token_file(path); }).find("too short"), std::string::npos);

  write_token_file(path, {1, 2, 3});
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(8);
    const std::uint32_t version = 9;
    f.write(reinterpret_cast<const char*>(&version), 4);
  }
  EXPECT_NE(error_of([&] { read_token_file(path); }).find("version 9"), std::string::npos);
  EXPECT_NE(error_of([&] { read_token_file(temp("missing.tok")); }).find("missing.tok: no such file"), std::string::npos);
}

// An empty file holds no token at all: a clear error even where no minimum is asked for (it read
// the largest element of an empty list).
TEST(TokenFile, AnEmptyFileIsAClearError) {
  const std::string path = temp("empty.txt");
  std::ofstream(path, std::ios::binary).flush();
  EXPECT_NE(error_of([&] { load_dataset(path, 0, 256, 1); }).find("holds no tokens"), std::string::npos);
}

TEST(TokenFile, AnyTextFileIsTokenizedByteByByte) {
  const std::string path = temp("text.txt");
  std::ofstream(path, std::ios::binary) << "ab\xff";
  EXPECT_EQ(tokenize_bytes(path), (std::vector<std::uint16_t>{'a', 'b', 255}));
}

TEST(TokenFile, TheSyntheticCorpusIsDeterministicTextWithStructure) {
  const auto a = synthetic_corpus(5000, 1), b = synthetic_corpus(5000, 1), c = synthetic_corpus(5000, 2);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  ASSERT_EQ(a.size(), 5000u);
  std::size_t spaces = 0;
  for (auto t : a) {
    EXPECT_TRUE(t == ' ' || t == '.' || (t >= 'a' && t <= 'z')) << t;
    spaces += (t == ' ');
  }
  EXPECT_GT(spaces, 500u);  // words, not one long string
}

TEST(TokenFile, LoadDatasetChecksSizeAndVocabulary) {
  EXPECT_EQ(load_dataset("synthetic", 1000, 256, 1).size(), std::size_t{1} << 20);
  const std::string path = temp("small.tok");
  write_token_file(path, std::vector<std::uint16_t>(100, 300));
  EXPECT_NE(error_of([&] { load_dataset(path, 1000, 256, 1); }).find("fewer than the 1000"), std::string::npos);
  EXPECT_NE(error_of([&] { load_dataset(path, 50, 256, 1); }).find("--vocab 301"), std::string::npos);
  EXPECT_NE(error_of([&] { load_dataset(temp("nope.txt"), 50, 256, 1); }).find("no such file"), std::string::npos);
}

}  // namespace
}  // namespace trainmem
