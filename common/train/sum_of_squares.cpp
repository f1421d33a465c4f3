#include "common/train/sum_of_squares.h"

#include "common/device/device_ops.h"
#include "common/model/storage_type.h"
#include "kernels/grad_norm.h"
#include "kernels/kernel_cost.h"

namespace trainmem {

SumOfSquares::SumOfSquares(Device& device) : device_(device) {
  if (!device_.cuda_pattern()) return;
  accumulator_ = Tensor(device_.allocator(), {1}, DType::f32, MemoryCategory::workspace, "grad_norm.accumulator");
  reset();
}

void SumOfSquares::reset() {
  host_sum_ = 0;
  if (accumulator_.numel() > 0) zero_device_memory(device_, accumulator_.data(), accumulator_.nbytes());
}

void SumOfSquares::add(const void* data, std::size_t count, DType dtype) {
  with_storage_type(dtype, [&](auto tag) {
    using T = decltype(tag);
    // reads the n values once (kernels/kernel_cost.h), on every backend
    kernels::KernelCost cost(kernel_stream(device_), kernels::memory_call<T>("sum_of_squares", double(count), 1, 0, 2));
    if (!device_.computes()) return;
    if (!device_.cuda_pattern()) {
      host_sum_ += kernels::cpu::sum_of_squares<T>(static_cast<const T*>(data), count);
      return;
    }
    TRAINMEM_CUDA_KERNEL("sum_of_squares", kernels::cuda::sum_of_squares_accumulate<T>(
                                               nullptr, accumulator_.data_as<float>(), static_cast<const T*>(data), count));
  });
}

double SumOfSquares::total() {
  if (!device_.cuda_pattern()) return host_sum_;
  float device_sum = 0;
  copy_device_to_host(device_, &device_sum, accumulator_.data(), sizeof device_sum);
  return device_sum;
}

}  // namespace trainmem
