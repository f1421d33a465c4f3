// What the loader tests share (test_lazy_loading on the CPU, test_lazy_loading_cuda on a GPU):
// a batch as the host sees it, pulling batches through device tensors, the batch a loader must
// yield (from the tokens and the epoch permutation alone), and a temporary folder for files.
#pragma once
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <system_error>
#include <vector>

#include "common/data/batch_source.h"
#include "common/device/device_ops.h"
#include "common/tensor/tensor.h"
#include "suites/lazy_loading/shuffle_order.h"

namespace trainmem::lazy_loading {

struct Batch {
  std::vector<std::int32_t> tokens, targets;
  bool operator==(const Batch& other) const { return tokens == other.tokens && targets == other.targets; }
};

// Pulls `count` batches from `source` through device tensors of category data, read back to the
// host after each. `before_next(i)`, when given, runs before batch i is asked for (a GPU test
// queues work on the compute stream there).
inline std::vector<Batch> pull(Device& device, BatchSource& source, std::size_t B, std::size_t T, std::size_t count,
                               const std::function<void(std::size_t)>& before_next = {}) {
  const auto b = static_cast<std::int64_t>(B), t = static_cast<std::int64_t>(T);
  Tensor x(device.allocator(), {b, t}, DType::i32, MemoryCategory::data, "test.tokens");
  Tensor y(device.allocator(), {b, t}, DType::i32, MemoryCategory::data, "test.targets");
  std::vector<Batch> out;
  for (std::size_t i = 0; i < count; ++i) {
    if (before_next) before_next(i);
    source.next(x, y);
    Batch batch{std::vector<std::int32_t>(B * T), std::vector<std::int32_t>(B * T)};
    copy_device_to_host(device, batch.tokens.data(), x.data(), x.nbytes());
    copy_device_to_host(device, batch.targets.data(), y.data(), y.nbytes());
    out.push_back(std::move(batch));
  }
  return out;
}

// What batch k must be, computed from the host tokens and the epoch permutation alone.
inline Batch expected_batch(const std::vector<std::uint16_t>& data, std::size_t B, std::size_t T, std::uint64_t seed,
                            std::uint64_t k) {
  ShuffleOrder order(data.size(), B, T, seed);
  const auto perm = order.permutation(k / order.batches_per_epoch());
  Batch batch{std::vector<std::int32_t>(B * T), std::vector<std::int32_t>(B * T)};
  for (std::size_t b = 0; b < B; ++b) {
    const std::size_t start = perm[(k % order.batches_per_epoch()) * B + b] * T;
    for (std::size_t t = 0; t < T; ++t) {
      batch.tokens[b * T + t] = data[start + t];
      batch.targets[b * T + t] = data[start + t + 1];
    }
  }
  return batch;
}

// A fresh directory for the test's files, removed at the end.
struct TempDir {
  std::filesystem::path path;
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string name = std::string("trainmem-lazy-") + info->name() + "-" + std::to_string(::getpid());
    for (char& c : name)
      if (c == '/') c = '_';
    path = std::filesystem::temp_directory_path() / name;
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  std::string file(const std::string& name) const { return (path / name).string(); }
};

}  // namespace trainmem::lazy_loading
