// --data and the commands that only look at a run (issue 25): estimate, max-batch and
// train --device meta check the data as train does, with train's words, and hold no host memory
// in proportion to the batch; the data file's format is its content's; flags that shape a
// technique are refused without it.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/data/token_file.h"
#include "common/tests/command_runner.h"
#include "suites/trainmem/tests/trainmem_program.h"

namespace trainmem {
namespace {

using cli_test::CliRun;
using cli_test::temp_path;
using cli_test::trainmem;



// The one line of an input error (exit 2), from "error: " on.
std::string input_error(const std::string& args) {
  SCOPED_TRACE("trainmem " + args);
  const CliRun r = trainmem(args);
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_EQ(testing_support::count_lines(r.err), 1) << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
  const std::size_t at = r.err.find("error: ");
  return at == std::string::npos ? r.err : r.err.substr(at);
}

nlohmann::json json_of(const std::string& args) {
  SCOPED_TRACE("trainmem " + args);
  const CliRun r = trainmem(args);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return nlohmann::json::parse(r.out, nullptr, false);
}

// A token file of `n` tokens of the synthetic corpus (every token below tiny's vocabulary, 256).
std::string token_file(const std::string& name, std::size_t n) {
  const std::string path = temp_path(name);
  write_token_file(path, synthetic_corpus(n, 3));
  return path;
}

constexpr std::size_t kTinySeq = 64;  // the tiny preset's T

// --- the same data checks as train, with train's words

// A batch the data cannot hold: train refused it, estimate said "fits" (sequential and lazy).
TEST(CliData, EstimateRefusesABatchTheDataCannotHoldAsTrainDoes) {
  const std::string path = token_file("small.tok", 10 * kTinySeq + 1);  // B = 10 at most
  for (const char* loader : {"sequential", "lazy", "eager"}) {
    const std::string flags = std::string("--model tiny --batch 11 --loader ") + loader + " --data " + path;
    const std::string refused = input_error("train --device cpu --steps 1 " + flags);
    EXPECT_NE(refused.find("fewer than the 705"), std::string::npos) << refused;
    EXPECT_EQ(input_error("estimate " + flags), refused) << loader;
    EXPECT_EQ(input_error("train --device meta --steps 1 " + flags), refused) << loader;
  }
  std::remove(path.c_str());
}

// The largest micro-batch under the eager loader is the most the data holds: the search stopped
// with an error blaming a batch the user never gave ("one batch of 11 x 64 needs 705").
TEST(CliData, EstimatesLargestBatchStopsAtTheData) {
  const std::string path = token_file("ten_rows.tok", 10 * kTinySeq + 1);
  for (const char* loader : {"eager", "lazy", "sequential"}) {
    const nlohmann::json j = json_of(std::string("estimate --model tiny --batch 1 --device-memory 1GiB --json --loader ") +
                                     loader + " --data " + path);
    ASSERT_TRUE(j.is_object()) << loader;
    EXPECT_EQ(j["device"]["max_batch"], 10) << loader;
    EXPECT_EQ(j["device"]["data_max_batch"], 10) << loader;
  }
  const CliRun table = trainmem("estimate --model tiny --batch 1 --device-memory 1GiB --data " + path);
  EXPECT_NE(table.out.find("largest micro-batch that fits: 10 (the data's limit, not memory's"), std::string::npos)
      << table.out << table.err;
  std::remove(path.c_str());
}

// max-batch printed the data's limit as "the largest micro-batch that fits".
TEST(CliData, MaxBatchSaysWhenTheDataLimitsTheBatch) {
  const std::string path = token_file("six_rows.tok", 6 * kTinySeq + 1);
  const std::string flags = "max-batch --device cpu --model tiny --device-memory 64MiB --data " + path;
  const nlohmann::json j = json_of(flags + " --json");
  ASSERT_TRUE(j.is_object());
  EXPECT_EQ(j["max_batch"], 6);
  EXPECT_EQ(j["data_limit"], 6);
  EXPECT_EQ(j["max_batch_is_data_limit"], true);
  EXPECT_EQ(j["max_batch_is_limit"], false);
  for (const nlohmann::json& trial : j["trials"]) EXPECT_LE(trial["batch"].get<int>(), 6) << j["trials"].dump();
  const CliRun text = trainmem(flags);
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("the data, not memory, limits the batch: --data " + path + " holds 385 tokens"),
            std::string::npos)
      << text.out;
  std::remove(path.c_str());
}

// --- estimate refuses what train refuses, with train's words

TEST(CliData, EstimateRefusesWhatTrainRefuses) {
  // synthetic data: its letters are outside a vocabulary of 2
  const std::string vocab = input_error("train --device cpu --steps 1 --vocab 2");
  EXPECT_NE(vocab.find("token 122 is outside the model's vocabulary of 2"), std::string::npos) << vocab;
  EXPECT_EQ(input_error("estimate --vocab 2"), vocab);
  EXPECT_EQ(input_error("train --device meta --steps 1 --vocab 2"), vocab);
  EXPECT_EQ(input_error("max-batch --device cpu --vocab 2"), vocab);
  // --pattern goes with --device meta
  const std::string pattern = input_error("train --device cpu --pattern cuda --steps 1");
  EXPECT_NE(pattern.find("--pattern cuda applies to --device meta"), std::string::npos) << pattern;
  EXPECT_EQ(input_error("estimate --device cpu --pattern cuda"), pattern);
  EXPECT_EQ(trainmem("estimate --device meta --pattern cuda --device-memory 1GiB --json").exit_code, 0);
}

// --- the format of a data file is its content's

TEST(CliData, ATokenFileIsReadAsTokensWhateverItsName) {
  const std::string path = temp_path("CORPUS.TOK");
  write_token_file(path, std::vector<std::uint16_t>(20 * kTinySeq, 300));  // tokens of a vocabulary of 301
  // as tokens: 300 is outside tiny's 256 (as bytes, every token was below 256 and it trained)
  const std::string refused = input_error("train --device cpu --steps 1 --model tiny --data " + path);
  EXPECT_NE(refused.find("token 300 is outside the model's vocabulary of 256"), std::string::npos) << refused;
  EXPECT_EQ(trainmem("train --device cpu --steps 1 --model tiny --vocab 301 --data " + path).exit_code, 0);
  std::remove(path.c_str());

  const std::string text = temp_path("notes.tok");
  std::FILE* f = std::fopen(text.c_str(), "w");
  std::fputs("some words, not tokens\n", f);
  std::fclose(f);
  const std::string named = input_error("train --device cpu --steps 1 --data " + text);
  EXPECT_NE(named.find("named like a token file but not one"), std::string::npos) << named;
  std::remove(text.c_str());
}

// --- flags that shape FSDP need --fsdp

TEST(CliData, FsdpFlagsWithoutFsdpAreRefusedNamingIt) {
  for (const char* flag : {"--fsdp-prefetch on", "--fsdp-unit 2-layers"})
    for (const char* command : {"train --device cpu --steps 1 ", "estimate "}) {
      const std::string error = input_error(std::string(command) + flag);
      EXPECT_NE(error.find(" needs --fsdp"), std::string::npos) << error;
    }
}

// --- a data file changed during a run

// `trainmem train --loader lazy` on a token file that `change` alters once the first step is
// printed: the run must end with a one-line error naming the file (exit 2) and write no result.
// Before: a file rewritten with out-of-vocabulary tokens trained on (loss above ln V, reads and
// writes outside the embedding, exit 0); a truncated one died of SIGBUS without a word.
CliRun train_while(const std::string& path, const std::string& json, const std::function<void()>& change) {
  const std::string err_path = temp_path("changed_stderr.txt");
  // --steps far more than the test waits for: the run can only end by noticing the change
  // (timeout ends it, as a failure, if it does not).
  const std::string command = "timeout -k 5 120 '" + std::string(TRAINMEM_BINARY) +
                              "' train --device cpu --model tiny --steps 100000000 --loader lazy --data '" + path +
                              "' --json '" + json + "' 2>'" + err_path + "'";
  CliRun r;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return r;
  char line[1024];
  bool changed = false;
  while (std::fgets(line, sizeof line, pipe) != nullptr) {
    r.out += line;
    if (!changed) {
      change();
      changed = true;
    }
  }
  const int status = pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.err = testing_support::read_text_file(err_path);
  std::remove(err_path.c_str());
  return r;
}

TEST(CliData, ATokenFileChangedDuringALazyRunEndsItNamingTheFile) {
  const std::string path = token_file("changing.tok", 1 << 20);
  const std::string json = temp_path("changing.json");
  auto rewrite = [&] {
    const std::vector<std::uint16_t> tokens(1 << 20, 300);
    std::FILE* f = std::fopen(path.c_str(), "r+b");
    std::fseek(f, static_cast<long>(kTokenFileHeaderBytes), SEEK_SET);
    std::fwrite(tokens.data(), 2, tokens.size(), f);
    std::fclose(f);
  };
  auto truncate_it = [&] { ASSERT_EQ(truncate(path.c_str(), 4096), 0); };
  for (const auto& [change, expected] :
       {std::pair<std::function<void()>, std::string>{rewrite, "token 300, outside the model's vocabulary of 256"},
        // "changed" (the size checked before a read) or "was cut short" (a read that raced the truncation)
        std::pair<std::function<void()>, std::string>{truncate_it, "while this run was reading it"}}) {
    write_token_file(path, synthetic_corpus(1 << 20, 3));
    std::remove(json.c_str());
    const CliRun r = train_while(path, json, change);
    SCOPED_TRACE(expected);
    EXPECT_NE(r.out.find("step "), std::string::npos) << r.out;
    EXPECT_EQ(r.exit_code, 2) << r.err;
    // the last line of stderr (the lines before it name the device and the model)
    const std::size_t last_line = r.err.rfind('\n', r.err.size() - 2) + 1;
    EXPECT_EQ(r.err.find("trainmem: error: " + path), last_line) << r.err;
    EXPECT_NE(r.err.find(expected), std::string::npos) << r.err;
    EXPECT_FALSE(std::ifstream(json).good()) << "a result was written";
  }
  std::remove(path.c_str());
}

// --- no host memory in proportion to the batch on the meta device

// `trainmem ARGS`, stdout and stderr discarded: its exit code and its peak resident memory.
struct Measured {
  int exit_code = -1;
  long long peak_rss_bytes = 0;
};
Measured measure(const std::vector<std::string>& args) {
  std::vector<char*> argv{const_cast<char*>(TRAINMEM_BINARY)};
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    const int null = ::open("/dev/null", O_WRONLY);
    dup2(null, STDOUT_FILENO);
    dup2(null, STDERR_FILENO);
    execv(TRAINMEM_BINARY, argv.data());
    _exit(127);
  }
  Measured m;
  int status = 0;
  struct rusage usage {};
  if (pid < 0 || wait4(pid, &status, 0, &usage) != pid) return m;
  m.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  m.peak_rss_bytes = static_cast<long long>(usage.ru_maxrss) * 1024;  // Linux: KiB
  return m;
}

// estimate --model gpt2-1.5b --batch 1048576 took 43 s and 14.9 GB: the meta run held the batch's
// tokens on the host (the token vector, the reader's int32 inputs and targets, the losses: 14
// bytes a token, 896 MiB at the B x T = 2^26 here). Now the peak resident memory at B = 65536
// rows of T = 1024 is that at B = 1, to within one int32 copy of the batch's tokens (256 MiB);
// estimate's search for the largest micro-batch (over the default CPU budget) is included.
TEST(CliData, AMetaRunHoldsNoHostMemoryInProportionToTheBatch) {
  const long long batch_tokens = 65536LL * 1024;
  const long long one_int32_copy = 4 * batch_tokens;
  for (const std::vector<std::string>& command :
       {std::vector<std::string>{"estimate", "--model", "tiny", "--seq", "1024"},
        std::vector<std::string>{"train", "--device", "meta", "--device-memory", "1000000TiB", "--steps", "2", "--model",
                                 "tiny", "--seq", "1024"},
        std::vector<std::string>{"train", "--device", "meta", "--device-memory", "1000000TiB", "--steps", "2", "--model",
                                 "tiny", "--seq", "1024", "--loader", "lazy"}}) {
    std::vector<std::string> small = command, large = command;
    small.insert(small.end(), {"--batch", "1"});
    large.insert(large.end(), {"--batch", "65536"});
    const Measured at_1 = measure(small), at_65536 = measure(large);
    SCOPED_TRACE(command[0] + " " + command[1]);
    ASSERT_EQ(at_1.exit_code, 0);
    ASSERT_EQ(at_65536.exit_code, 0);
    EXPECT_LT(at_65536.peak_rss_bytes - at_1.peak_rss_bytes, one_int32_copy)
        << "peak resident " << at_1.peak_rss_bytes << " bytes at B=1, " << at_65536.peak_rss_bytes << " at B=65536";
  }
}

// Issue 27: an estimate with ZeRO-Offload allocated the offloaded state on the host and ran the
// CPU AdamW, on the meta device (gpt2-124m: 16 s and 2.2 GB, against 0.12 s and 0.26 GB without
// offload; gpt2-1.5b was killed for lack of host memory). On meta the host buffers are counted,
// never allocated: with offload the peak resident memory is that without it, to within one byte
// per parameter. Any host buffer per element would exceed that bound: the smallest, a 16-bit
// parameter shard, is 2 bytes an element (the optimizer's state is 16).
TEST(CliData, AMetaRunWithOffloadHoldsNoHostState) {
  const std::vector<std::string> model = {"--model", "tiny", "--layers", "2", "--dim", "1024", "--heads", "8"};
  std::string args;
  for (const std::string& a : model) args += " " + a;
  const nlohmann::json e = json_of("estimate --json --zero 2 --offload optimizer" + args);
  ASSERT_TRUE(e.contains("num_parameters")) << e;
  const auto parameters = e["num_parameters"].get<long long>();
  ASSERT_GT(e["sharding"]["formula_per_rank_bytes"]["host"].get<long long>(), 8 * parameters);  // what offload would hold

  const std::vector<std::string> train_meta = {"train", "--device", "meta", "--device-memory", "1000000TiB", "--steps", "2"};
  for (const auto& [command, offload] : {std::pair{std::vector<std::string>{"estimate"}, std::vector<std::string>{"--zero", "2", "--offload", "optimizer"}},
                                        std::pair{std::vector<std::string>{"estimate"}, std::vector<std::string>{"--zero", "3", "--offload", "params"}},
                                        std::pair{train_meta, std::vector<std::string>{"--zero", "2", "--offload", "optimizer"}},
                                        std::pair{train_meta, std::vector<std::string>{"--zero", "3", "--offload", "params"}}}) {
    std::vector<std::string> without = command, with = command;
    without.insert(without.end(), model.begin(), model.end());
    without.insert(without.end(), offload.begin(), offload.begin() + 2);  // the same ZeRO stage, no offload
    with.insert(with.end(), model.begin(), model.end());
    with.insert(with.end(), offload.begin(), offload.end());
    SCOPED_TRACE(command[0] + " " + offload[1] + " " + offload[3]);
    const Measured plain = measure(without), offloaded = measure(with);
    ASSERT_EQ(plain.exit_code, 0);
    ASSERT_EQ(offloaded.exit_code, 0);
    EXPECT_LT(offloaded.peak_rss_bytes - plain.peak_rss_bytes, parameters)
        << "peak resident " << plain.peak_rss_bytes << " bytes without offload, " << offloaded.peak_rss_bytes << " with";
  }

  // Counted all the same: the meta run's host bytes are the formula's.
  const std::string json = temp_path("offload_meta.json");
  std::string train = "train --device meta --device-memory 1000000TiB --steps 2 --zero 3 --offload params --json " + json + args;
  const CliRun r = trainmem(train);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::ifstream in(json);
  const nlohmann::json result = nlohmann::json::parse(in, nullptr, false);
  ASSERT_TRUE(result.contains("zero")) << result;
  EXPECT_EQ(result["zero"]["per_rank_bytes"]["host"], result["zero"]["predicted_per_rank_bytes"]["host"]);
  EXPECT_GT(result["zero"]["per_rank_bytes"]["host"].get<long long>(), 16 * parameters);
  std::remove(json.c_str());
}

}  // namespace
}  // namespace trainmem
