// Sizes computed from input never wrap around: the one helper (checked_math.h) and the places
// that use it — tensor sizes, allocator requests and statistics, trace sizes, the model's counts.
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <limits>

#include <nlohmann/json.hpp>

#include "common/allocator/caching_allocator.h"
#include "common/allocator/host_device_memory.h"
#include "common/allocator/trace_replay.h"
#include "common/model/model_config.h"
#include "common/tensor/tensor.h"
#include "common/tests/error_of.h"
#include "common/util/checked_math.h"

namespace trainmem {
namespace {

constexpr std::uint64_t kMax64 = std::numeric_limits<std::uint64_t>::max();

// What the helpers and their users throw: a SizeLimitError.
std::string message_of(const std::function<void()>& f) { return testing_support::error_of<SizeLimitError>(f); }

TEST(CheckedMath, ProductsAndSumsBelowTheLimitAreExact) {
  EXPECT_EQ(checked_mul(3, 5, "x"), 15u);
  EXPECT_EQ(checked_add(kMaxBytes - 1, 1, "x"), kMaxBytes);
  EXPECT_EQ(checked_product({2, 3, 7}, "x"), 42u);
  EXPECT_EQ(checked_product({kMax64, 0, kMax64}, "x"), 0u);  // a zero factor anywhere: 0, not an overflow
  EXPECT_EQ(checked_limit(kMaxBytes, "x"), kMaxBytes);
  EXPECT_EQ(checked_mul(kMax64, 1, "x", kMax64), kMax64);
}

TEST(CheckedMath, WrapAroundAndTheLimitAreRefusedNamingValuesAndLimit) {
  // 2^32 * 2^32 wraps to 0 in 64 bits.
  EXPECT_EQ(message_of([] { checked_mul(std::uint64_t{1} << 32, std::uint64_t{1} << 32, "the scores"); }),
            "the scores: 4294967296 x 4294967296 is more than the limit of 4611686018427387904 (2^62)");
  EXPECT_EQ(message_of([] { checked_add(kMax64, 1, "a sum"); }),
            "a sum: 18446744073709551615 + 1 is more than the limit of 4611686018427387904 (2^62)");
  EXPECT_EQ(message_of([] { checked_product({1 << 20, 1 << 20, 1 << 20, 1 << 20}, "B x H x T x T"); }),
            "B x H x T x T: 1048576 x 1048576 x 1048576 x 1048576 is more than the limit of 4611686018427387904 (2^62)");
  EXPECT_EQ(message_of([] { checked_limit(kMaxBytes + 1, "a request"); }),
            "a request: 4611686018427387905 is more than the limit of 4611686018427387904 (2^62)");
  EXPECT_EQ(message_of([] { checked_mul(10, 10, "n", 99); }), "n: 10 x 10 is more than the limit of 99");
}

TEST(CheckedMath, TensorShapesThatWouldWrapAroundAreRefused) {
  BudgetDeviceMemory device(std::size_t{1} << 30, /*backed=*/false);
  CachingAllocator allocator(device);
  // 2^31 x 2^31 x 4 bytes = 2^64: numel * 4 wrapped to 0 bytes before.
  const std::string message = message_of([&] {
    Tensor t(allocator, {std::int64_t{1} << 31, std::int64_t{1} << 31}, DType::f32, MemoryCategory::activations, "scores");
  });
  EXPECT_NE(message.find("tensor 'scores' [2147483648, 2147483648] x 4 bytes"), std::string::npos) << message;
  EXPECT_EQ(allocator.stats().allocated_bytes[0].current, 0);
  // A zero dimension makes an empty tensor whatever the others are.
  Tensor empty(allocator, {0, std::int64_t{1} << 62}, DType::f32, MemoryCategory::activations, "empty");
  EXPECT_EQ(empty.nbytes(), 0u);
}

TEST(CheckedMath, TheAllocatorRefusesRequestsItsStatisticsCannotCount) {
  BudgetDeviceMemory device(std::size_t{1} << 30, /*backed=*/false);
  CachingAllocator allocator(device);
  EXPECT_THROW(allocator.allocate(kMax64), SizeLimitError);  // rounding up to 512 wrapped to 0 before
  EXPECT_THROW(allocator.allocate(kMaxBytes + 1), SizeLimitError);
  EXPECT_EQ(allocator.stats().requested_bytes[0].current, 0);
  EXPECT_EQ(allocator.stats().num_ooms, 0);
}

TEST(CheckedMath, RunningTotalsStopAtTheLargestInt64InsteadOfWrapping) {
  Stat s;
  const std::int64_t big = std::int64_t{1} << 62;
  for (int i = 0; i < 3; ++i) {  // 3 x 2^62 passes 2^63 - 1
    s.increase(big);
    s.decrease(big);
  }
  EXPECT_EQ(s.allocated, std::numeric_limits<std::int64_t>::max());
  EXPECT_EQ(s.freed, std::numeric_limits<std::int64_t>::max());
  EXPECT_EQ(s.current, 0);
  EXPECT_EQ(s.peak, big);
}

TEST(CheckedMath, TraceSizesAboveTheLimitAreTraceErrors) {
  const auto trace = nlohmann::json::parse(R"([{"action":"alloc","id":1,"size":4611686018427387905}])");
  try {
    parse_trace(trace, "t.json");
    ADD_FAILURE() << "no TraceError";
  } catch (const TraceError& e) {
    EXPECT_STREQ(e.what(),
                 "t.json: event 0: \"size\" 4611686018427387905 is more than the largest request the allocator counts, "
                 "4611686018427387904 (2^62) bytes");
  }
  EXPECT_NO_THROW(parse_trace(nlohmann::json::parse(R"([{"action":"alloc","id":1,"size":4611686018427387904}])")));
}

TEST(CheckedMath, ModelCountsAndRunSizesAreChecked) {
  ModelConfig c = model_preset("gpt2-124m");
  EXPECT_EQ(c.num_parameters(), 124475904u);  // the checked formula gives the known count (llm.c's, Vp = 50304)
  EXPECT_NO_THROW(check_run_sizes(c, 1024));
  c.dim = std::size_t{1} << 40;  // 12 C^2 passes 2^62
  EXPECT_THROW(c.num_parameters(), SizeLimitError);
  ModelConfig long_context = model_preset("tiny");
  long_context.seq = std::size_t{1} << 20;
  long_context.heads = 4096;
  long_context.dim = 4096;
  const std::string message = message_of([&] { check_run_sizes(long_context, std::size_t{1} << 20); });
  EXPECT_NE(message.find("the attention scores (B x H x T x T x 4 bytes)"), std::string::npos) << message;
}

}  // namespace
}  // namespace trainmem
