// The sum of squares of several tensors on one device, read once: the global gradient norm (both
// optimizers) and the check, after an update, that every weight is still finite.
//
// On the CPU each tensor is summed in double; on the CUDA pattern every tensor adds into one
// device float (kernels/grad_norm.h), "grad_norm.accumulator", allocated by the constructor in
// category workspace (one of the named rules of Device::cuda_pattern) and copied to the host
// once by total(). On a device that computes nothing (meta) the sum is 0.
#pragma once
#include <cstddef>

#include "common/device/device.h"
#include "common/tensor/tensor.h"

namespace trainmem {

class SumOfSquares {
 public:
  explicit SumOfSquares(Device& device);
  void add(const void* data, std::size_t count, DType dtype);  // values stored as `dtype`
  double total();  // the sum so far
  void reset();    // back to 0, for another sum on the same accumulator

 private:
  Device& device_;
  double host_sum_ = 0;
  Tensor accumulator_;  // the CUDA pattern's device float
};

}  // namespace trainmem
