// The token file format, byte tokenization, the synthetic corpus, and their error messages.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <csignal>

#include "common/data/dataset_check.h"
#include "common/data/guarded_read.h"
#include "common/data/host_tokens.h"
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

// The format of a data file is its content's (issue 25): a token file named X.TOK, or named
// anything at all, was tokenized byte by byte (its header and its uint16s as bytes), silently.
TEST(DataFormat, ATokenFileIsReadAsTokensWhateverItsName) {
  const std::vector<std::uint16_t> tokens = {300, 7, 65535, 0, 42};
  for (const char* name : {"upper.TOK", "mixed.Tok", "corpus.bin", "no_extension"}) {
    const std::string path = temp(name);
    write_token_file(path, tokens);
    EXPECT_EQ(data_format(path), DataFormat::token_file) << name;
    EXPECT_EQ(load_dataset(path, 2, 65536, 1), tokens) << name;
  }
}

// A file named like a token file that is not one is refused, not tokenized as bytes.
TEST(DataFormat, AFileNamedTokWithoutTheMagicIsRefused) {
  for (const char* name : {"text.tok", "text.TOK"}) {
    const std::string path = temp(name);
    std::ofstream(path, std::ios::binary) << "plain text, not tokens";
    const std::string error = error_of([&] { load_dataset(path, 2, 256, 1); });
    EXPECT_NE(error.find(std::string(name) + ": named like a token file but not one"), std::string::npos) << error;
  }
  const std::string text = temp("text.txt");
  std::ofstream(text, std::ios::binary) << "plain";
  EXPECT_EQ(data_format(text), DataFormat::bytes);
}

// The facts estimate checks (read without keeping the tokens) are the facts of what train loads.
TEST(DatasetCheck, InspectGivesTheFactsOfWhatLoadReads) {
  std::mt19937 rng(5);
  std::vector<std::uint16_t> tokens(3 * (1 << 19) + 17);  // more than one 1 MiB read buffer
  for (auto& t : tokens) t = static_cast<std::uint16_t>(rng() % 1000);
  tokens[tokens.size() - 3] = 4321;  // the largest, in the last buffer
  const std::string tok = temp("inspect.tok");
  write_token_file(tok, tokens);
  const std::string txt = temp("inspect.txt");
  std::ofstream(txt, std::ios::binary) << "hello \xf0 world";
  for (const std::string& spec : {tok, txt, std::string("synthetic")}) {
    const std::vector<std::uint16_t> loaded = load_dataset(spec, 2, 65536, 1);
    const DatasetFacts facts = inspect_dataset(spec, 2);
    EXPECT_EQ(facts.tokens, loaded.size()) << spec;
    EXPECT_EQ(facts.max_token, *std::max_element(loaded.begin(), loaded.end())) << spec;
  }
  // the same checks, the same words
  EXPECT_EQ(error_of([&] { check_dataset(inspect_dataset(tok, 2), tok, 2, 4000); }),
            error_of([&] { load_dataset(tok, 2, 4000, 1); }));
  EXPECT_EQ(error_of([&] { check_dataset(inspect_dataset("synthetic", 2), "synthetic", 2, 100); }),
            error_of([&] { load_dataset("synthetic", 2, 100, 1); }));
  EXPECT_EQ(largest_batch_in(1 + 3 * 64 * 5, 3, 64), 5u);
  EXPECT_EQ(largest_batch_in(3 * 64 * 5, 3, 64), 4u);
}

// A file mapped, then cut short: a read of a page past the new end raises SIGBUS. Inside
// read_guarded it is a `false`, and the process lives on (before: killed, without a word).
TEST(GuardedRead, ASigbusInsideTheReadIsReturnedAsFalse) {
  const std::string path = temp("guarded.bin");
  const long page = sysconf(_SC_PAGESIZE);
  const std::vector<char> bytes(static_cast<std::size_t>(4 * page), 'x');
  std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  const int fd = ::open(path.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  void* map = ::mmap(nullptr, bytes.size(), PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  ASSERT_NE(map, MAP_FAILED);
  const volatile char* mapped = static_cast<const char*>(map);
  char seen = 0;
  auto read_last_page = [&] { seen = mapped[3 * page]; };
  EXPECT_TRUE(read_guarded(read_last_page));
  EXPECT_EQ(seen, 'x');
  std::filesystem::resize_file(path, static_cast<std::uintmax_t>(page));
  seen = 0;
  EXPECT_FALSE(read_guarded(read_last_page));
  EXPECT_FALSE(read_guarded(read_last_page));  // and again: the handler stays in place
  auto read_first_page = [&] { seen = mapped[0]; };
  EXPECT_TRUE(read_guarded(read_first_page));
  EXPECT_EQ(seen, 'x');
  ::munmap(map, bytes.size());
}

// Outside a guarded read, SIGBUS keeps its action: the process still ends.
TEST(GuardedReadDeathTest, ASigbusOutsideAGuardedReadStillEndsTheProcess) {
  auto nothing = [] {};
  read_guarded(nothing);  // the handler is installed
  EXPECT_DEATH(std::raise(SIGBUS), "");
}

// A mapped token file checks its size before each read of its tokens.
TEST(GuardedRead, AMappedTokenFileThatChangedSizeIsADataErrorNamingIt) {
  const std::string path = temp("shrinks.tok");
  write_token_file(path, std::vector<std::uint16_t>(50000, 3));
  const HostTokens tokens = HostTokens::map_file(path);
  EXPECT_EQ(tokens.max_token(), 3);
  std::filesystem::resize_file(path, 1000);
  const std::string error = error_of([&] { tokens.max_token(); });
  EXPECT_NE(error.find(path + ": the file changed while this run was reading it (it had 100032 bytes when the run "
                              "opened it, now 1000)"),
            std::string::npos)
      << error;
}

}  // namespace
}  // namespace trainmem
