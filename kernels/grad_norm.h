// Gradient-norm clipping. The global norm is sqrt(sum of squares over every gradient tensor);
// if it exceeds max_norm, every gradient is scaled by max_norm / norm (applied through AdamW's
// grad_scale, so no extra pass over the gradients).
//
// The gradient is in its storage type T (kernels/dtype.h): float, bf16 or fp16, named by the
// caller (sum_of_squares<bf16>(x, n); float when not named), widened exactly before squaring. On
// the CPU the squares are summed in double, in an order set by n alone (blocks over the cores,
// lanes in a block: kernels/cpu/optimizer.cpp), so a 16-bit sum is bit for bit the fp32 path's on
// the widened gradient, on any number of threads; on CUDA each block sums in double and adds one float into the accumulator.
#pragma once
#include <cmath>

#include "kernels/dtype.h"
#include "kernels/kernel_stream.h"

namespace trainmem::kernels {
namespace cpu {
template <typename T = float>
double sum_of_squares(In<T> x, std::size_t n);  // accumulated in double
}
namespace cuda {
// Adds sum(x^2) of this tensor into *device_accumulator (one float on the device): call it for
// every gradient, then read the accumulator once.
template <typename T = float>
void sum_of_squares_accumulate(void* stream, float* device_accumulator, In<T> x, std::size_t n);
}

// The factor that brings a gradient of global norm `norm` down to `max_norm` (1 if already below;
// max_norm <= 0 disables clipping).
inline float clip_scale(double norm, double max_norm) {
  if (max_norm <= 0 || !(norm > max_norm)) return 1.0f;
  return static_cast<float>(max_norm / (norm + 1e-6));
}
}  // namespace trainmem::kernels
