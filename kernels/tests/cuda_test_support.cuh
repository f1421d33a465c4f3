// What the CUDA kernel tests share on top of gpu_test_support.h (skip without a GPU, DeviceBuffer,
// TestStream, finish, the fp32 all_close):
//   - GpuTest: a fixture whose tests skip, saying why, where no GPU answers, and else get a
//     non-default stream to run on;
//   - PoisonedBuffer: a written output, NaN until the kernel writes it;
//   - all_close<T>: outputs in a storage type (fp32, bf16, fp16) compared as the floats they stand
//     for, the type named in the message;
//   - the gpu_test and dtype_test names these tests use, so that one `using namespace cuda_test;`
//     replaces a block of using-declarations in each file.
// CUDA tests only (gpu_test_support.h needs the CUDA runtime).
#pragma once
#include <gtest/gtest.h>

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "kernels/dtype.h"
#include "kernels/tests/dtype_test_support.h"
#include "kernels/tests/gpu_test_support.h"

namespace trainmem::kernels::cuda_test {

using dtype_test::random_tokens;
using dtype_test::random_values;
using dtype_test::unit_roundoff;
using dtype_test::widen;
using gpu_test::DeviceBuffer;
using gpu_test::finish;
using gpu_test::TestStream;
using gpu_test::Tolerance;

// The fixture of GPU tests (class MyGpuTests : public cuda_test::GpuTest {}; TEST_F(MyGpuTests, ...)):
// SetUp skips each test, with the reason, where no CUDA device can be used (as SKIP_WITHOUT_GPU()
// in a test's body does), and else makes the stream the test runs its kernels on (stream()).
class GpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SKIP_WITHOUT_GPU();
    stream_.emplace();
  }
  void* stream() const { return stream_->get(); }

 private:
  std::optional<TestStream> stream_;  // made only once a GPU is known to answer
};

// A device array a kernel must write in full: poisoned (0xff bytes, NaN in every float format) as
// it is made, so an element the kernel forgets fails the comparison.
template <typename T>
class PoisonedBuffer : public DeviceBuffer<T> {
 public:
  explicit PoisonedBuffer(std::size_t n, std::size_t offset = 0) : DeviceBuffer<T>(n, offset) { this->poison(); }
};

// Outputs in storage type T compared as the floats they stand for: gpu_test::all_close on the
// widened values, "(bf16)" and so on added to `what`.
template <typename T>
::testing::AssertionResult all_close(const std::string& what, const std::vector<T>& gpu, const std::vector<T>& cpu,
                                     Tolerance tol) {
  return gpu_test::all_close(what + " (" + dtype_name<T>() + ")", widen(gpu), widen(cpu), tol);
}

}  // namespace trainmem::kernels::cuda_test
