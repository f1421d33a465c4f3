// Proofs for --loader eager|lazy:
//  - both loaders yield byte-identical batches in the same (seeded, per-epoch shuffled) order,
//    for several seeds and epochs, prefetch 0/1/3, pinned on/off, from a vector or a mmap'ed file;
//    and each batch is exactly the windows ShuffleOrder names (targets = inputs shifted by one);
//  - device memory of category `data`: exactly N ring buffers (tokens + targets, each rounded as
//    the allocator rounds) under lazy, exactly the dataset under eager;
//  - under N ranks each rank's batch is its rows of the batch one process with N*B rows sees;
//  - bad token files (truncated, wrong magic, too short, smaller than one batch) give DataError,
//    and so does a file rewritten or truncated while a loader reads it;
//  - the worker thread stops cleanly when the loader is destroyed mid-epoch, and an exception in
//    it surfaces in next() on the main thread.
#include <gtest/gtest.h>

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <set>
#include <stdexcept>
#include <thread>

#include "common/allocator/allocator_config.h"
#include "common/data/token_file.h"
#include "common/model/gpt.h"
#include "common/tests/cpu_device.h"
#include "common/tests/enum_table_checks.h"
#include "common/train/trainer.h"
#include "suites/lazy_loading/eager_loader.h"
#include "suites/lazy_loading/lazy_loader.h"
#include "suites/lazy_loading/lazy_loading_technique.h"
#include "suites/lazy_loading/loader_test_support.h"

namespace trainmem::lazy_loading {
namespace {

namespace fs = std::filesystem;

using testing_support::cpu_device;

std::int64_t data_current(Device& d) { return d.allocator().stats().by_category[index_of(MemoryCategory::data)].current; }
std::int64_t data_peak(Device& d) { return d.allocator().stats().by_category[index_of(MemoryCategory::data)].peak; }

// Runs fn on a thread; false if it has not finished within `seconds` (the thread is then left).
bool finishes_within(std::function<void()> fn, double seconds) {
  auto done = std::make_shared<std::promise<void>>();
  std::future<void> f = done->get_future();
  std::thread th([fn = std::move(fn), done] {
    fn();
    done->set_value();
  });
  if (f.wait_for(std::chrono::duration<double>(seconds)) != std::future_status::ready) {
    th.detach();
    return false;
  }
  th.join();
  return true;
}

// --- the order

TEST(ShuffleOrder, EachEpochIsAPermutationFixedBySeedAndEpoch) {
  ShuffleOrder a(10001, 4, 16, 42), b(10001, 4, 16, 42), c(10001, 4, 16, 43);
  EXPECT_EQ(a.windows(), 625u);  // (10001 - 1) / 16
  EXPECT_EQ(a.batches_per_epoch(), 156u);
  const auto p0 = a.permutation(0);
  std::set<std::uint64_t> seen(p0.begin(), p0.end());
  EXPECT_EQ(seen.size(), 625u);
  EXPECT_EQ(*seen.rbegin(), 624u);
  EXPECT_EQ(p0, b.permutation(0));
  EXPECT_NE(p0, a.permutation(1));
  EXPECT_NE(p0, c.permutation(0));
  ShuffleOrder plain(10001, 4, 16, 42, /*shuffle=*/false);
  std::size_t starts[4];
  plain.row_starts(157, starts);  // epoch 1, batch 1
  EXPECT_EQ(starts[0], 4u * 16u);
  EXPECT_EQ(starts[3], 7u * 16u);
}

// --- same batches, same order

struct Config {
  std::uint64_t seed;
  std::size_t prefetch;
  bool pinned;
};

class SameBatches : public ::testing::TestWithParam<Config> {};

TEST_P(SameBatches, LazyAndEagerYieldByteIdenticalBatchesForThreeEpochs) {
  const Config c = GetParam();
  const std::size_t B = 4, T = 16;
  const std::vector<std::uint16_t> data = synthetic_corpus(5001, 3);  // 312 windows, 78 batches per epoch
  auto device = cpu_device();
  EagerLoader eager(*device, HostTokens(data), B, T, {c.seed, true});
  LazyLoaderOptions lo;
  lo.prefetch = c.prefetch;
  lo.pinned = c.pinned;
  lo.seed = c.seed;
  LazyLoader lazy(*device, HostTokens(data), B, T, lo);
  ASSERT_EQ(eager.batches_per_epoch(), 78u);
  const std::size_t count = 3 * 78 + 5;  // into a fourth epoch
  const auto e = pull(*device, eager, B, T, count);
  const auto l = pull(*device, lazy, B, T, count);
  for (std::size_t k = 0; k < count; ++k) {
    ASSERT_EQ(e[k], l[k]) << "batch " << k;
    ASSERT_EQ(e[k], expected_batch(data, B, T, c.seed, k)) << "batch " << k;
  }
  EXPECT_NE(e[0], e[78]) << "epoch 1 must not repeat epoch 0's order";
  EXPECT_EQ(lazy.batches_served(), count);
}

INSTANTIATE_TEST_SUITE_P(SeedsPrefetchPinned, SameBatches,
                         ::testing::Values(Config{1, 0, true}, Config{1, 1, true}, Config{1, 3, true},
                                           Config{1, 2, false}, Config{7, 0, false}, Config{7, 1, false},
                                           Config{7, 3, true}, Config{12345, 2, true}, Config{12345, 3, false}),
                         [](const auto& info) {
                           return "seed" + std::to_string(info.param.seed) + "_prefetch" +
                                  std::to_string(info.param.prefetch) + (info.param.pinned ? "_pinned" : "_unpinned");
                         });

TEST(SameBatchesFromFile, MappedTokenFileGivesTheSameBatchesAsTheVector) {
  TempDir dir;
  const std::vector<std::uint16_t> data = synthetic_corpus(20001, 5);
  write_token_file(dir.file("data.tok"), data);
  HostTokens mapped = HostTokens::map_file(dir.file("data.tok"));
  ASSERT_TRUE(mapped.mapped());
  ASSERT_EQ(mapped.size(), data.size());
  auto device = cpu_device();
  const std::size_t B = 8, T = 32;
  LazyLoader from_file(*device, std::move(mapped), B, T, {});
  EagerLoader from_vector(*device, HostTokens(data), B, T, {});
  const auto a = pull(*device, from_file, B, T, 2 * from_file.batches_per_epoch() + 3);
  const auto b = pull(*device, from_vector, B, T, a.size());
  EXPECT_EQ(a, b);
}

// --- several ranks (mpirun): rank r's batch k is rows r*B .. r*B+B-1 of one process's batch k
// with N*B rows, under either loader, across epochs; and the ranks' rows never overlap.

// The rows of a [B, T] batch, rank by rank, in one [N*B, T] batch.
Batch concatenate(const std::vector<Batch>& ranks) {
  Batch all;
  for (const Batch& r : ranks) {
    all.tokens.insert(all.tokens.end(), r.tokens.begin(), r.tokens.end());
    all.targets.insert(all.targets.end(), r.targets.begin(), r.targets.end());
  }
  return all;
}

class RanksTakeTheirRows : public ::testing::TestWithParam<std::size_t> {};

TEST_P(RanksTakeTheirRows, OfTheBatchOneProcessWithAllRowsSees) {
  const std::size_t world = GetParam(), B = 3, T = 16;
  const std::vector<std::uint16_t> data = synthetic_corpus(5001, 9);  // 312 windows
  auto device = cpu_device();
  EagerLoader whole(*device, HostTokens(data), world * B, T, {5, true});
  const std::size_t per_epoch = whole.batches_per_epoch();
  ASSERT_EQ(per_epoch, 312u / (world * B));
  const std::size_t count = 2 * per_epoch + 3;  // into a third epoch
  const auto expected = pull(*device, whole, world * B, T, count);

  std::vector<std::vector<Batch>> eager_rows, lazy_rows;
  for (std::size_t r = 0; r < world; ++r) {
    EagerLoader eager(*device, HostTokens(data), B, T, {5, true, r, world});
    LazyLoaderOptions lo;
    lo.seed = 5;
    lo.rank = r;
    lo.world = world;
    LazyLoader lazy(*device, HostTokens(data), B, T, lo);
    EXPECT_EQ(eager.batches_per_epoch(), per_epoch);
    EXPECT_EQ(lazy.batches_per_epoch(), per_epoch);
    eager_rows.push_back(pull(*device, eager, B, T, count));
    lazy_rows.push_back(pull(*device, lazy, B, T, count));
  }
  for (std::size_t k = 0; k < count; ++k) {
    std::vector<Batch> e, l;
    for (std::size_t r = 0; r < world; ++r) {
      e.push_back(eager_rows[r][k]);
      l.push_back(lazy_rows[r][k]);
    }
    ASSERT_EQ(concatenate(e), expected[k]) << "eager, batch " << k;
    ASSERT_EQ(concatenate(l), expected[k]) << "lazy, batch " << k;
  }
  // Different ranks get different rows (the same rows would be the bug of an unsharded loader).
  EXPECT_NE(eager_rows[0][0], eager_rows[1][0]);
}

INSTANTIATE_TEST_SUITE_P(Worlds, RanksTakeTheirRows, ::testing::Values(2, 3),
                         [](const auto& info) { return "world" + std::to_string(info.param); });

TEST(RanksTakeTheirRows, ADatasetSmallerThanOneGlobalBatchNamesTheRanks) {
  const std::vector<std::uint16_t> data = synthetic_corpus(100, 1);  // 3 windows of 32 + 1
  auto device = cpu_device();
  EXPECT_NO_THROW(EagerLoader(*device, HostTokens(data), 3, 32, {1, true, 0, 1}));
  try {
    EagerLoader(*device, HostTokens(data), 2, 32, {1, true, 1, 2});
    FAIL() << "2 ranks x 2 rows of 32 need 129 tokens";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("one batch of 2 ranks x 2 x 32 needs 129"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("or fewer ranks"), std::string::npos) << e.what();
  }
  EXPECT_THROW(ShuffleOrder(data.size(), 1, 32, 1, true, 2, 2), std::invalid_argument);  // rank 2 of 2
}

TEST(Training, LossesAreIdenticalUnderEitherLoader) {
  auto run = [](bool lazy) {
    auto device = cpu_device();
    GPT model(*device, model_preset("tiny"), 11);
    const std::size_t B = 2, T = 32;
    std::unique_ptr<BatchSource> data;
    if (lazy) data = std::make_unique<LazyLoader>(*device, HostTokens(synthetic_corpus(30000, 2)), B, T);
    else data = std::make_unique<EagerLoader>(*device, HostTokens(synthetic_corpus(30000, 2)), B, T);
    TrainerOptions topt;
    topt.batch = B;
    topt.seq = T;
    Trainer trainer(model, *data, topt);
    std::vector<double> losses;
    for (int i = 0; i < 3; ++i) losses.push_back(trainer.step().loss);
    // The loader's buffers plus the trainer's two batch tensors; nothing else is `data`.
    const auto batch = static_cast<std::int64_t>(round_size(B * T * 4));
    const std::int64_t loader = lazy ? 2 * 2 * batch : static_cast<std::int64_t>(round_size(30000 * 4));
    EXPECT_EQ(data_peak(*device), loader + 2 * batch) << (lazy ? "lazy" : "eager");
    return losses;
  };
  EXPECT_EQ(run(true), run(false));
}

// --- device memory, exact bytes

TEST(DeviceMemory, LazyHoldsExactlyPrefetchBatchBuffers) {
  const std::size_t B = 5, T = 77;  // 1540 bytes a tensor -> 2048 with the allocator's rounding
  const auto batch = static_cast<std::int64_t>(round_size(B * T * sizeof(std::int32_t)));
  ASSERT_EQ(batch, 2048);
  for (std::size_t N : {0u, 1u, 2u, 3u, 5u}) {
    auto device = cpu_device();
    LazyLoaderOptions lo;
    lo.prefetch = N;
    {
      LazyLoader lazy(*device, HostTokens(synthetic_corpus(200000, 1)), B, T, lo);
      EXPECT_EQ(data_current(*device), static_cast<std::int64_t>(2 * N) * batch) << "N=" << N;
      pull(*device, lazy, B, T, 20);
      EXPECT_EQ(data_peak(*device), static_cast<std::int64_t>(2 * N + 2) * batch) << "N=" << N << " (+ the 2 batch tensors)";
      EXPECT_EQ(lazy.prefetch(), N);
      EXPECT_FALSE(lazy.pinned()) << "the CPU backend has no pinned memory";
    }
    EXPECT_EQ(data_current(*device), 0) << "the ring is returned when the loader goes";
  }
}

TEST(DeviceMemory, EagerHoldsExactlyTheDataset) {
  const std::size_t B = 5, T = 77;
  const auto batch = static_cast<std::int64_t>(round_size(B * T * sizeof(std::int32_t)));
  for (std::size_t n : {100003u, 1000000u}) {  // small pool (391 KiB) and large pool (3.8 MiB)
    auto device = cpu_device();
    EagerLoader eager(*device, HostTokens(synthetic_corpus(n, 1)), B, T);
    const auto dataset = static_cast<std::int64_t>(round_size(n * sizeof(std::int32_t)));
    EXPECT_EQ(data_current(*device), dataset) << "n=" << n;
    EXPECT_EQ(eager.dataset().nbytes(), n * 4);
    pull(*device, eager, B, T, 10);
    EXPECT_EQ(data_peak(*device), dataset + 2 * batch) << "n=" << n;
  }
}

// --- bad files

TEST(BadFiles, TruncatedWrongMagicTooShortAndTooSmallGiveDataError) {
  TempDir dir;
  const std::vector<std::uint16_t> data = synthetic_corpus(1000, 1);
  auto expect_error = [](const std::function<void()>& fn, const std::string& needle) {
    try {
      fn();
      ADD_FAILURE() << "no DataError; expected one saying '" << needle << "'";
    } catch (const DataError& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  // truncated: the header promises 1000 tokens, the file holds 999.5
  write_token_file(dir.file("truncated.tok"), data);
  fs::resize_file(dir.file("truncated.tok"), kTokenFileHeaderBytes + 1999);
  expect_error([&] { HostTokens::map_file(dir.file("truncated.tok")); }, "truncated or corrupt");
  // wrong magic
  write_token_file(dir.file("magic.tok"), data);
  {
    std::fstream f(dir.file("magic.tok"), std::ios::in | std::ios::out | std::ios::binary);
    f.write("NOTTOKEN", 8);
  }
  expect_error([&] { HostTokens::map_file(dir.file("magic.tok")); }, "wrong magic");
  // shorter than the header
  {
    std::ofstream f(dir.file("short.tok"), std::ios::binary);
    f.write("TMTOKENS", 8);
  }
  expect_error([&] { HostTokens::map_file(dir.file("short.tok")); }, "32-byte header");
  expect_error([&] { HostTokens::map_file(dir.file("missing.tok")); }, "missing.tok: no such file");
  // valid, but smaller than one batch (8 x 64 + 1 = 513 tokens needed, 500 present)
  write_token_file(dir.file("small.tok"), synthetic_corpus(500, 1));
  auto device = cpu_device();
  expect_error([&] { LazyLoader l(*device, HostTokens::map_file(dir.file("small.tok")), 8, 64); }, "needs 513");
  expect_error([&] { EagerLoader l(*device, HostTokens::map_file(dir.file("small.tok")), 8, 64); }, "needs 513");
  EXPECT_EQ(data_current(*device), 0);
  // exactly one batch is enough
  write_token_file(dir.file("one.tok"), synthetic_corpus(513, 1));
  LazyLoader one(*device, HostTokens::map_file(dir.file("one.tok")), 8, 64);
  EXPECT_EQ(one.batches_per_epoch(), 1u);
  pull(*device, one, 8, 64, 3);
}

// A token file changed under an open loader (issue 25). The tokens are checked against the
// vocabulary when the file is opened; what a loader reads later is checked again, batch by batch,
// and the file's size before each read. Rewritten in place with tokens outside the vocabulary,
// or cut short, the next batch is a DataError naming the file. Before: the tokens went on to the
// embedding and the loss (reads and writes outside their tensors, exit 0), and a truncated file
// ended the process with SIGBUS, without a word.
constexpr std::size_t kVocab = 256;

// Overwrites every token after the header with `token`: in place (the same file, the same size).
void rewrite_tokens(const std::string& path, std::uint16_t token) {
  const std::vector<std::uint16_t> tokens((fs::file_size(path) - kTokenFileHeaderBytes) / 2, token);
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(static_cast<std::streamoff>(kTokenFileHeaderBytes));
  f.write(reinterpret_cast<const char*>(tokens.data()), static_cast<std::streamsize>(tokens.size() * 2));
}

// The message of the first DataError among the next `limit` batches ("" when none failed).
std::string first_data_error(Device& device, BatchSource& source, std::size_t B, std::size_t T, std::size_t limit) {
  for (std::size_t i = 0; i < limit; ++i) {
    try {
      pull(device, source, B, T, 1);
    } catch (const DataError& e) {
      return e.what();
    }
  }
  return "";
}

enum class Change { rewritten_out_of_vocabulary, truncated };

struct ChangedFileCase {
  const char* loader;  // lazy0, lazy2 (prefetch), sequential
  Change change;
};

class ChangedFile : public ::testing::TestWithParam<ChangedFileCase> {};

TEST_P(ChangedFile, TheNextBatchesAreADataErrorNamingTheFile) {
  const ChangedFileCase c = GetParam();
  TempDir dir;
  const std::string path = dir.file("corpus.tok");
  write_token_file(path, synthetic_corpus(200000, 1));  // 100 pages of tokens, each below 'z' + 1
  const std::size_t B = 4, T = 32;
  auto device = cpu_device();
  std::unique_ptr<BatchSource> source;
  std::size_t prefetch = 0;
  if (std::string(c.loader) == "sequential") {
    source = std::make_unique<SequentialBatches>(*device, HostTokens::map_file(path), B, T, 0, 1, kVocab);
  } else {
    LazyLoaderOptions o;
    o.prefetch = prefetch = std::string(c.loader) == "lazy2" ? 2 : 0;
    o.vocab = kVocab;
    source = std::make_unique<LazyLoader>(*device, HostTokens::map_file(path), B, T, o);
  }
  ASSERT_EQ(first_data_error(*device, *source, B, T, 1), "");  // the file as it was opened
  if (c.change == Change::rewritten_out_of_vocabulary) rewrite_tokens(path, 300);
  else fs::resize_file(path, kTokenFileHeaderBytes + 2 * 1000);
  // The batches made before the change (at most `prefetch`, plus the one being made) may come
  // out; the next is the error.
  const std::string error = first_data_error(*device, *source, B, T, prefetch + 2);
  ASSERT_NE(error, "") << "no DataError after the file changed";
  EXPECT_NE(error.find(path), std::string::npos) << error;
  if (c.change == Change::rewritten_out_of_vocabulary)
    EXPECT_NE(error.find("token 300, outside the model's vocabulary of 256"), std::string::npos) << error;
  else
    // "changed" (the size, checked before each read) or "was cut short" (a read that raced the
    // truncation, caught by the SIGBUS guard)
    EXPECT_NE(error.find("while this run was reading it"), std::string::npos) << error;
}

INSTANTIATE_TEST_SUITE_P(Loaders, ChangedFile,
                         ::testing::Values(ChangedFileCase{"lazy0", Change::rewritten_out_of_vocabulary},
                                           ChangedFileCase{"lazy2", Change::rewritten_out_of_vocabulary},
                                           ChangedFileCase{"sequential", Change::rewritten_out_of_vocabulary},
                                           ChangedFileCase{"lazy0", Change::truncated},
                                           ChangedFileCase{"lazy2", Change::truncated},
                                           ChangedFileCase{"sequential", Change::truncated}),
                         [](const auto& info) {
                           return std::string(info.param.loader) +
                                  (info.param.change == Change::truncated ? "_truncated" : "_rewritten");
                         });

// The eager loader reads the file once, at the upload: a file rewritten between the open's check
// and the upload is refused there, before a token reaches the device.
TEST(ChangedFile, EagerChecksTheTokensItUploads) {
  TempDir dir;
  const std::string path = dir.file("corpus.tok");
  write_token_file(path, synthetic_corpus(20000, 1));
  auto device = cpu_device();
  HostTokens tokens = HostTokens::map_file(path);
  tokens.check_vocab(kVocab, path);  // as train checks it at the open
  rewrite_tokens(path, 300);
  try {
    EagerLoader eager(*device, std::move(tokens), 4, 32, {1, true, 0, 1, kVocab});
    ADD_FAILURE() << "the eager loader uploaded tokens outside the vocabulary";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find(path + ", read for the upload: token 300"), std::string::npos) << e.what();
  }
}

TEST(BadFiles, WrongBatchTensorShapeIsRefused) {
  auto device = cpu_device();
  LazyLoader lazy(*device, HostTokens(synthetic_corpus(5000, 1)), 4, 16);
  EXPECT_THROW(pull(*device, lazy, 4, 8, 1), std::invalid_argument);
  EagerLoader eager(*device, HostTokens(synthetic_corpus(5000, 1)), 4, 16);
  EXPECT_THROW(pull(*device, eager, 2, 16, 1), std::invalid_argument);
}

// --- the worker thread

TEST(Worker, DestroyingTheLoaderMidEpochDoesNotHang) {
  auto device = cpu_device();
  const std::vector<std::uint16_t> data = synthetic_corpus(50000, 1);
  for (std::size_t N : {1u, 3u}) {
    // right after construction (the worker is filling the ring)
    EXPECT_TRUE(finishes_within([&] { LazyLoader l(*device, HostTokens(data), 4, 16, {N, true, 1, true, 0, 1, {}}); }, 10));
    // mid-epoch, with the ring full and the worker waiting for a free slot
    EXPECT_TRUE(finishes_within(
        [&] {
          LazyLoader l(*device, HostTokens(data), 4, 16, {N, true, 1, true, 0, 1, {}});
          pull(*device, l, 4, 16, 5);
          std::this_thread::sleep_for(std::chrono::milliseconds(20));
        },
        10));
    // while the worker is inside a (slow) batch
    EXPECT_TRUE(finishes_within(
        [&] {
          LazyLoaderOptions lo;
          lo.prefetch = N;
          lo.before_assemble = [](std::uint64_t k) {
            if (k >= 2) std::this_thread::sleep_for(std::chrono::milliseconds(200));
          };
          LazyLoader l(*device, HostTokens(data), 4, 16, lo);
          pull(*device, l, 4, 16, 2);
        },
        10));
  }
  EXPECT_EQ(data_current(*device), 0);
}

TEST(Worker, AnExceptionInTheWorkerSurfacesInNext) {
  for (std::size_t N : {0u, 1u, 3u}) {
    auto device = cpu_device();
    LazyLoaderOptions lo;
    lo.prefetch = N;
    std::atomic<std::thread::id> assembler;
    lo.before_assemble = [&assembler](std::uint64_t k) {
      assembler = std::this_thread::get_id();
      if (k == 3) throw std::runtime_error("injected failure at batch 3");
    };
    LazyLoader lazy(*device, HostTokens(synthetic_corpus(50000, 1)), 4, 16, lo);
    Tensor x(device->allocator(), {4, 16}, DType::i32, MemoryCategory::data, "x");
    Tensor y(device->allocator(), {4, 16}, DType::i32, MemoryCategory::data, "y");
    for (int k = 0; k < 3; ++k) {
      ASSERT_NO_THROW(lazy.next(x, y)) << "batches before the failure are served";
    }
    if (N > 0) {
      EXPECT_NE(assembler.load(), std::this_thread::get_id()) << "N>0 assembles on the worker";
    }
    for (int again = 0; again < 2; ++again) {
      try {
        lazy.next(x, y);
        ADD_FAILURE() << "N=" << N << ": next() did not throw";
      } catch (const std::runtime_error& e) {
        EXPECT_STREQ(e.what(), "injected failure at batch 3");
      }
    }
    EXPECT_EQ(lazy.batches_served(), 3u);
  }  // and the loader is destroyed cleanly afterwards
}

// --loader's names (common/cli/enum_table.h).
TEST(LoaderNames, TheTableIsWhole) { testing_support::expect_whole_table(kLoaders); }

}  // namespace
}  // namespace trainmem::lazy_loading
