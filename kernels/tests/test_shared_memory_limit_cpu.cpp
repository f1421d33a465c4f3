// kernels/cuda/shared_memory_limit.h: a kernel's dynamic shared memory against the device's
// per-block opt-in limit. The wording is checked here, on any machine; the GPU test
// (test_flash_attention_cuda) checks that allow_shared_memory asks the device and throws it.
#include <gtest/gtest.h>

#include <string>

#include "kernels/cuda/shared_memory_limit.h"

namespace trainmem::kernels::cuda {
namespace {

constexpr std::size_t kHopperOptin = 227 * 1024;  // cudaDevAttrMaxSharedMemoryPerBlockOptin on sm_90

TEST(SharedMemoryLimit, UpToTheLimitFits) {
  EXPECT_EQ(shared_memory_refusal("flash v3 forward", 0, kHopperOptin, 0), "");
  EXPECT_EQ(shared_memory_refusal("flash v3 forward", kHopperOptin, kHopperOptin, 0), "");
}

TEST(SharedMemoryLimit, OneByteMoreIsRefusedWithTheKernelBothSizesAndTheDevice) {
  const std::string why = shared_memory_refusal("flash v3 backward", kHopperOptin + 1, kHopperOptin, 1);
  EXPECT_NE(why.find("flash v3 backward: needs 232449 bytes of dynamic shared memory per block"), std::string::npos)
      << why;
  EXPECT_NE(why.find("CUDA device 1 allows at most 232448"), std::string::npos) << why;
  EXPECT_NE(why.find("cudaDevAttrMaxSharedMemoryPerBlockOptin"), std::string::npos) << why;
}

}  // namespace
}  // namespace trainmem::kernels::cuda
