#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "common/allocator/host_device_memory.h"
#include "common/tensor/tensor.h"

namespace trainmem {
namespace {

TEST(Tensor, OwnsItsStorageForItsLifetime) {
  BudgetDeviceMemory device(GiB, /*backed=*/true);
  CachingAllocator a(device);
  {
    Tensor t(a, {4, 64, 768}, DType::f32, MemoryCategory::activations, "x");
    EXPECT_EQ(t.numel(), 4 * 64 * 768);
    EXPECT_EQ(t.nbytes(), 4u * 64 * 768 * 4);
    EXPECT_EQ(a.stats().by_category[index_of(MemoryCategory::activations)].current, 786432);
    // Real, writable memory on the CPU backend: fill and read back random values.
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> u(-1, 1);
    float* p = t.data_as<float>();
    std::vector<float> expected(static_cast<std::size_t>(t.numel()));
    for (std::size_t i = 0; i < expected.size(); ++i) p[i] = expected[i] = u(rng);
    EXPECT_EQ(std::memcmp(p, expected.data(), t.nbytes()), 0);
    EXPECT_EQ(t.describe(), "x f32[4, 64, 768] activations");
  }
  EXPECT_EQ(a.stats().allocated_bytes[0].current, 0);  // freed when it went out of scope
}

TEST(Tensor, MovesTransferOwnership) {
  BudgetDeviceMemory device(GiB, false);
  CachingAllocator a(device);
  Tensor t(a, {1000}, DType::bf16, MemoryCategory::parameters, "w");
  void* p = t.data();
  Tensor u = std::move(t);
  EXPECT_EQ(u.data(), p);
  EXPECT_EQ(t.data(), nullptr);
  EXPECT_EQ(a.stats().allocation[0].current, 1);
  u = Tensor(a, {10}, DType::f32, MemoryCategory::gradients, "g");  // the old storage is freed
  EXPECT_EQ(a.stats().allocation[0].current, 1);
  EXPECT_EQ(a.stats().by_category[index_of(MemoryCategory::parameters)].current, 0);
}

TEST(Tensor, AViewSharesStorageAndNeverFreesIt) {
  BudgetDeviceMemory device(GiB, /*backed=*/true);
  CachingAllocator a(device);
  Tensor flat(a, {30}, DType::f32, MemoryCategory::parameters, "flat");
  {
    Tensor w = Tensor::view(flat.data_as<float>() + 6, {4, 6}, DType::f32, MemoryCategory::parameters, "w");
    EXPECT_TRUE(w.is_view());
    EXPECT_FALSE(flat.is_view());
    EXPECT_EQ(w.numel(), 24);
    w.data_as<float>()[0] = 2.5f;
    EXPECT_EQ(flat.data_as<float>()[6], 2.5f);  // the same memory
    Tensor moved = std::move(w);
    EXPECT_TRUE(moved.is_view());
    moved.reset();
  }
  EXPECT_EQ(a.stats().allocation[0].current, 1);  // only `flat`; the views freed nothing
  EXPECT_EQ(a.stats().allocated_bytes[0].current, 512);
}

TEST(Tensor, WrongElementTypeAndNegativeShapesAreErrors) {
  BudgetDeviceMemory device(GiB, false);
  CachingAllocator a(device);
  Tensor t(a, {8}, DType::f16, MemoryCategory::other, "h");
  EXPECT_THROW(t.data_as<float>(), std::logic_error);
  EXPECT_NO_THROW(t.data_as<std::uint16_t>());
  EXPECT_THROW(Tensor(a, {2, -1}, DType::f32, MemoryCategory::other, "bad"), std::invalid_argument);
}

TEST(Tensor, TooBigForTheDeviceRaisesTheOomReport) {
  BudgetDeviceMemory device(64 * MiB, false);
  CachingAllocator a(device);
  EXPECT_THROW(Tensor(a, {1024, 1024, 32}, DType::f32, MemoryCategory::activations, "huge"), OutOfMemoryError);
}

}  // namespace
}  // namespace trainmem
