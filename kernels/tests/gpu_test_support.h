// What every GPU test needs, once: skipping with the reason where no GPU answers, device buffers
// that can be poisoned (0xff bytes: NaN in every float format, so an element a kernel forgets to
// write shows up), a non-default stream, and the comparison tolerance type.
#pragma once
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <iomanip>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace trainmem::kernels::gpu_test {

// nullptr where a CUDA device can be used; otherwise the reason it cannot.
inline const char* no_gpu_reason() {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    cudaGetLastError();  // clear the error, so no later check reports it again
    return cudaGetErrorString(status);
  }
  return count == 0 ? "no CUDA device found" : nullptr;
}

#define SKIP_WITHOUT_GPU()                                                                  \
  do {                                                                                      \
    const char* reason = ::trainmem::kernels::gpu_test::no_gpu_reason();                    \
    if (reason) GTEST_SKIP() << "GPU test skipped: no usable CUDA device (" << reason << ")"; \
  } while (0)

inline void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(status));
}

// A device array of n elements (RAII), starting `offset` elements into its allocation: with
// offset 1 a 16-bit pointer is only 2-byte aligned, as a slice of a larger tensor can be. Never
// zero bytes, so a zero-size op still gets a valid pointer.
template <typename T>
class DeviceBuffer {
 public:
  explicit DeviceBuffer(std::size_t n, std::size_t offset = 0) : n_(n), offset_(offset) {
    check(cudaMalloc(&base_, bytes()), "cudaMalloc");
  }
  explicit DeviceBuffer(const std::vector<T>& host, std::size_t offset = 0) : DeviceBuffer(host.size(), offset) {
    upload(host);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { cudaFree(base_); }

  T* get() const { return base_ + offset_; }
  void upload(const std::vector<T>& host) {
    if (host.size() != n_) throw std::invalid_argument("DeviceBuffer::upload: size mismatch");
    check(cudaMemcpy(get(), host.data(), n_ * sizeof(T), cudaMemcpyHostToDevice), "cudaMemcpy H2D");
    check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");  // done before an op runs on another stream
  }
  // Fills every byte with 0xff: each element reads as NaN (fp32, bf16 and fp16 alike).
  void poison() {
    check(cudaMemset(base_, 0xff, bytes()), "cudaMemset");
    check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  }
  std::vector<T> download() const {
    std::vector<T> host(n_);
    check(cudaMemcpy(host.data(), get(), n_ * sizeof(T), cudaMemcpyDeviceToHost), "cudaMemcpy D2H");
    return host;
  }

 private:
  std::size_t bytes() const { return std::max<std::size_t>(n_ + offset_, 1) * sizeof(T); }
  T* base_ = nullptr;
  std::size_t n_;
  std::size_t offset_;
};

// A non-default stream, so the kernels are checked to run on the stream they are given.
class TestStream {
 public:
  TestStream() { check(cudaStreamCreate(&stream_), "cudaStreamCreate"); }
  TestStream(const TestStream&) = delete;
  TestStream& operator=(const TestStream&) = delete;
  ~TestStream() { cudaStreamDestroy(stream_); }
  void* get() const { return stream_; }

 private:
  cudaStream_t stream_ = nullptr;
};

// Waits for everything queued (uploads and poison on the default stream, the op on its stream) and
// reports any error a kernel raised while running.
inline void finish() {
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  check(cudaGetLastError(), "cudaGetLastError");
}

// |gpu - cpu| <= atol + rtol * |cpu| (NaN never passes)
struct Tolerance {
  double atol;
  double rtol;
};

// Element by element: |gpu - cpu| <= atol + rtol * |cpu|. On failure: how many differ, how many
// are NaN (a poisoned element the kernel never wrote), the largest finite difference, and the
// first few mismatches.
inline ::testing::AssertionResult all_close(const std::string& what, const std::vector<float>& gpu,
                                            const std::vector<float>& cpu, Tolerance tol) {
  if (gpu.size() != cpu.size())
    return ::testing::AssertionFailure() << what << ": " << gpu.size() << " GPU values vs " << cpu.size() << " CPU";
  std::size_t wrong = 0, nans = 0;
  double worst = 0;
  std::ostringstream first;
  first << std::setprecision(9);
  for (std::size_t i = 0; i < cpu.size(); ++i) {
    const double ref = cpu[i], got = gpu[i];
    const double diff = std::fabs(got - ref);
    if (diff <= tol.atol + tol.rtol * std::fabs(ref)) continue;  // false for NaN: a poisoned element fails
    if (std::isnan(got)) ++nans;
    else worst = std::max(worst, diff);
    if (wrong < 5) first << "\n    [" << i << "] gpu " << got << "  cpu " << ref << "  |diff| " << diff;
    ++wrong;
  }
  if (wrong == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << what << ": " << wrong << " of " << cpu.size()
                                       << " elements differ beyond atol " << tol.atol << " + rtol " << tol.rtol
                                       << " * |cpu| (" << nans << " NaN, largest finite |diff| " << worst
                                       << "); first ones:" << first.str();
}

}  // namespace trainmem::kernels::gpu_test
