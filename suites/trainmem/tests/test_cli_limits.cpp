// Bad numbers get a clear error: every numeric flag has a stated range (0 is a value, not "not
// given"; floats must be finite), sizes computed from input never wrap around, and a data file or
// a run too large for this machine is refused before the work starts. Each case here was seen to
// misbehave (exit 0 with a wrong answer, a raw C++ message, a 309-digit number, or no answer).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <regex>
#include <string>
#include <utility>
#include <vector>

#include "common/data/token_file.h"
#include "common/tests/sanitizers.h"
#include "common/tests/command_runner.h"
#include "suites/trainmem/tests/trainmem_program.h"

namespace trainmem {
namespace {

using cli_test::CliRun;
using cli_test::temp_path;
using cli_test::trainmem;



// Exit 2, one line "trainmem: error: ..." containing `expected`, in plain numbers: no run of more
// than 20 digits (2^64 has 20), as CLI11's own range check printed a double's 309-digit limit.
void expect_refused(const std::string& args, const std::string& expected) {
  SCOPED_TRACE("trainmem " + args);
  const CliRun r = trainmem(args);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_EQ(testing_support::count_lines(r.err), 1) << r.err;
  EXPECT_EQ(r.err.rfind("trainmem: error: ", 0), 0u) << r.err;
  EXPECT_NE(r.err.find(expected), std::string::npos) << "expected '" << expected << "' in: " << r.err;
  EXPECT_FALSE(std::regex_search(r.err, std::regex("[0-9]{21}"))) << r.err;
  EXPECT_EQ(r.out.find("step"), std::string::npos) << "trained anyway: " << r.out;
}

TEST(CliLimits, ZeroIsAValueNotTheDefault) {
  for (const char* flag : {"--layers", "--heads", "--dim", "--seq"})
    expect_refused(std::string("train --steps 1 ") + flag + " 0", std::string(flag) + ": must be at least 1, not 0");
  expect_refused("train --steps 1 --vocab 0", "--vocab: must be at least 2, not 0");
  expect_refused("train --batch 0", "--batch: must be at least 1, not 0");
  expect_refused("train --steps -1", "--steps: must be at least 1, not -1");
  for (const char* command : {"train", "estimate", "max-batch"})
    expect_refused(std::string(command) + " --device-memory 0", "--device-memory: must be from 1MiB");
}

TEST(CliLimits, FloatsMustBeFiniteAndInRange) {
  expect_refused("train --lr nan", "--lr: must be a finite number, not 'nan'");
  expect_refused("train --lr inf", "--lr: must be a finite number, not 'inf'");
  expect_refused("train --lr 0", "--lr: must be greater than 0, not 0");
  expect_refused("train --weight-decay nan", "--weight-decay: must be a finite number");
  expect_refused("train --grad-clip nan", "--grad-clip: must be a finite number");
  expect_refused("train --grad-clip -1", "--grad-clip: must be at least 0, not -1");
  expect_refused("train --lr 1e39", "--lr: must be at most 3.40282e+38");  // not a float
  // 1e-300 became a float scale of 0, and step 2's loss -nan
  expect_refused("train --precision fp16 --loss-scale 1e-300", "--loss-scale: must be at least 5.96046e-08");
  expect_refused("train --precision fp16 --loss-scale-backoff 1", "--loss-scale-backoff: must be less than 1");
}

// A float flag is checked as the double it is written as, then stored as a float: 1e-50 passed
// "greater than 0" and trained with a learning rate of 0 (and 1e-40 with a denormal one).
TEST(CliLimits, FloatFlagsRefuseWhatAFloatCannotHold) {
  expect_refused("train --lr 1e-50",
                 "--lr: must be greater than 0 and at most 3.40282e+38, not 1e-50, which a float cannot hold (the "
                 "smallest it holds in full precision is 1.17549e-38)");
  expect_refused("train --lr 1e-40", "--lr: must be greater than 0 and at most 3.40282e+38, not 1e-40, which a float");
  expect_refused("estimate --weight-decay 1e-45", "--weight-decay: must be at least 0 and at most 3.40282e+38, not 1e-45");
  expect_refused("max-batch --grad-clip 1e-300", "--grad-clip: must be at least 0 and at most 3.40282e+38, not 1e-300");
  // What a float holds is accepted: its smallest normal value, its largest, and 0 where 0 is allowed.
  const CliRun r = trainmem("estimate --lr 1.1754944e-38 --weight-decay 0 --grad-clip 3.4028234e38");
  EXPECT_EQ(r.exit_code, 0) << r.err;
}

// --device-memory: every unit --help names is read (PiB and EiB were not), exactly (4EiB + 1 byte
// was read through a double as 4EiB and accepted), and a size past 64 bits is refused, not clamped.
TEST(CliLimits, DeviceMemoryIsReadExactlyInEveryUnitTheHelpNames) {
  const std::vector<std::pair<std::string, std::string>> sizes = {{"1PiB", "1125899906842624"},
                                                                   {"4EiB", "4611686018427387904"},
                                                                   {"4E", "4611686018427387904"},
                                                                   {"2PB", "2000000000000000"},
                                                                   {"4.5EB", "4500000000000000000"}};
  for (const auto& [size, bytes] : sizes) {
    SCOPED_TRACE(size);
    const CliRun r = trainmem("info --device cpu --json --device-memory " + size);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.out.find(std::string("\"device_memory_bytes\": ") + bytes), std::string::npos) << r.out;
  }
  const std::string range = "--device-memory: must be from 1MiB (1048576 bytes) to 4EiB (4611686018427387904 bytes), not ";
  expect_refused("info --device-memory 4611686018427387905", range + "4611686018427387905");
  expect_refused("info --device-memory 5EiB", range + "5EiB");
  expect_refused("info --device-memory 4.7EB", range + "4.7EB");
  for (const char* too_large : {"16EiB", "18446744073709551616", "20000PB"})
    expect_refused(std::string("info --device-memory ") + too_large,
                   std::string("--device-memory: size '") + too_large +
                       "' does not fit in 64 bits: the largest size is 18446744073709551615 bytes");
  const CliRun help = trainmem("train --help");
  for (const char* named : {"from 1MiB (1048576 bytes) to 4EiB", "PiB/P", "EiB/E", "EB (powers of 1000)"})
    EXPECT_NE(help.out.find(named), std::string::npos) << named << " in\n" << help.out;
}

TEST(CliLimits, HugeCountsAreRefusedInPlainNumbers) {
  expect_refused("train --batch 4294967296", "--batch: must be at most 1048576, not 4294967296");  // was std::bad_alloc
  expect_refused("train --batch 18446744073709551615", "--batch: must be at most 1048576");       // was vector::reserve
  expect_refused("train --batch 99999999999999999999", "--batch: must be at most 1048576");  // > 2^64
  expect_refused("train --prefetch 4294967296", "--prefetch: must be at most 64");
  expect_refused("train --batch 1.5", "--batch: must be a whole number from 1 to 1048576, not '1.5'");
  expect_refused("train --seed -1", "--seed: must be at least 0");
  expect_refused("train --zero 4", "--zero: must be at most 3, not 4");
  expect_refused("train --allocator-config max_split_size_mb:18446744073709551615", "2^62");
}

// Each of these answered "fits: yes" (or a peak of 0 bytes, or world size 1's figures).
TEST(CliLimits, EstimateRefusesSizesThatWouldWrapAround) {
  expect_refused("estimate --seq 9223372036854775808", "--seq: must be at most 1048576");
  expect_refused("estimate --batch 2305843009213693952", "--batch: must be at most 1048576");
  expect_refused("estimate --dim 18446744073709551615 --heads 1", "--dim: must be at most 65536");
  expect_refused("estimate --world-size 4294967297 --zero 3", "--world-size: must be at most 1048576");
  expect_refused("estimate --layers 1000000000000", "--layers: must be at most 1024");  // did not answer in 65 s
  // Inside every flag's range, a product can still pass 2^62 bytes: refused, naming it.
  expect_refused("estimate --seq 1048576 --batch 1048576 --layers 1 --heads 4096 --dim 65536",
                 "the attention scores (B x H x T x T x 4 bytes): 1048576 x 4096 x 1048576 x 1048576 x 4 is more than the "
                 "limit of 4611686018427387904 (2^62)");
}

// The largest inputs the ranges allow still get an answer (suites/trainmem/README.md records how long they take;
// times live in benchmarks, so this only checks that an answer comes). --vocab 123: the smallest
// the synthetic corpus's tokens fit ('z' + 1; estimate checks the data as train does).
TEST(CliLimits, EstimateAnswersAtTheLargestShapes) {
  TRAINMEM_SKIP_UNDER_SANITIZERS("the refused products of CliLimits and the meta runs of MetaDevice and Estimator");
  for (const char* args : {"--layers 1024 --dim 8 --heads 1 --seq 1 --vocab 123",
                           "--layers 1024 --dim 8 --heads 1 --seq 1 --vocab 123 --allocator-config expandable_segments:True",
                           "--layers 1024 --dim 8 --heads 1 --seq 1 --vocab 123 --fsdp full --world-size 1048576",
                           "--model gpt2-1.5b --layers 1024 --seq 1048576 --gpu h100-80gb"}) {
    SCOPED_TRACE(args);
    const CliRun r = trainmem(std::string("estimate ") + args);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.out.find("largest micro-batch that fits"), std::string::npos) << r.out;
  }
}

TEST(CliLimits, DataThatIsNotARegularFileIsRefused) {
  expect_refused("train --data /tmp", "/tmp: is a folder");  // said "0 tokens"
  expect_refused("train --data /dev/zero", "/dev/zero: not a regular file");  // grew without limit
  expect_refused("train --data /dev/zero --loader lazy", "/dev/zero: not a regular file");
}

// A token file whose header count is 2^63 or more wrapped the size check around.
TEST(CliLimits, TokenFileHeaderCountsDoNotWrapAround) {
  for (const std::uint64_t count : {std::uint64_t{1} << 63, ~std::uint64_t{0}, (std::uint64_t{1} << 63) + 1}) {
    const std::string path = temp_path("huge_count.tok");
    {
      std::ofstream f(path, std::ios::binary);
      f.write(kTokenFileMagic, sizeof kTokenFileMagic);
      const std::uint32_t version = kTokenFileVersion, dtype = kTokenDtypeUint16;
      const std::uint64_t reserved = 0;
      f.write(reinterpret_cast<const char*>(&version), 4);
      f.write(reinterpret_cast<const char*>(&dtype), 4);
      f.write(reinterpret_cast<const char*>(&count), 8);
      f.write(reinterpret_cast<const char*>(&reserved), 8);
      f.write("abcd", 4);
    }
    const std::string expected = "the header's token count (2 bytes each): " + std::to_string(count) + " x 2 is more than the limit";
    expect_refused("train --data " + path, expected);
    expect_refused("train --loader lazy --data " + path, expected);  // the memory-mapped reader
    std::remove(path.c_str());
  }
}

// A file whose tokens would not fit in host memory is refused before it is read: a sparse file
// of 1 TiB (2 TiB of uint16 tokens) costs no disk.
TEST(CliLimits, DataLargerThanHostMemoryIsRefusedBeforeReading) {
  const std::string path = temp_path("sparse.txt");
  {
    std::ofstream create(path);
  }
  if (truncate(path.c_str(), std::int64_t{1} << 40) != 0) GTEST_SKIP() << "cannot make a sparse 1 TiB file in " << path;
  expect_refused("train --data " + path, "1099511627776 tokens need 2199023255552 bytes of host memory, more than the");
  // The remedy comes from the lazy loader's registration (Technique::host_dataset_remedy).
  expect_refused("train --data " + path, "; use a smaller dataset, or a .tok file with --loader lazy, which memory-maps it");
  std::remove(path.c_str());
}

// Out of the device budget: stopped before the first step with the allocator's report (this run
// touched 5 GiB of host memory for 20 s before); beyond the host: stopped with the sizes.
TEST(CliLimits, ARunThatCannotFitStopsBeforeItStarts) {
  const CliRun oom = trainmem("train --device cpu --seq 1048576 --steps 1");
  EXPECT_EQ(oom.exit_code, 1) << oom.err;
  EXPECT_NE(oom.err.find("stopped before the first step"), std::string::npos) << oom.err;
  EXPECT_NE(oom.err.find("out of memory"), std::string::npos) << oom.err;
  EXPECT_NE(oom.err.find("what would help"), std::string::npos) << oom.err;
  EXPECT_EQ(oom.out.find("step"), std::string::npos) << oom.out;

  const CliRun host = trainmem("train --device cpu --device-memory 4096TiB --model gpt2-350m --batch 1024 --steps 1");
  EXPECT_EQ(host.exit_code, 1) << host.err;
  EXPECT_NE(host.err.find("of host memory (its peak reserved), more than the"), std::string::npos) << host.err;
  EXPECT_EQ(host.out.find("step"), std::string::npos) << host.out;
}

// A trace event's size of 2^64 - 1 was replayed as "requested_bytes current -1"; 1e400 gave the
// JSON library's raw message.
TEST(CliLimits, TraceSizesAreCheckedAndNumbersThatOverflowAreNamed) {
  const std::string huge = temp_path("huge.json"), overflow = temp_path("overflow.json");
  std::ofstream(huge) << R"([{"action":"alloc","id":1,"size":18446744073709551615}])";
  std::ofstream(overflow) << R"([{"action":"alloc","id":1,"size":1e400}])";
  expect_refused("replay " + huge,
                 "event 0: \"size\" 18446744073709551615 is more than the largest request the allocator counts, "
                 "4611686018427387904 (2^62) bytes");
  expect_refused("replay " + overflow, "not valid JSON: number overflow parsing '1e400'");
  std::remove(huge.c_str());
  std::remove(overflow.c_str());
}

}  // namespace
}  // namespace trainmem
