// Gradient-norm clipping. The global norm is sqrt(sum of squares over every gradient tensor);
// if it exceeds max_norm, every gradient is scaled by max_norm / norm (applied through AdamW's
// grad_scale, so no extra pass over the gradients).
#pragma once
#include <cmath>

#include "kernels/kernel_stream.h"

namespace trainmem::kernels {
namespace cpu {
double sum_of_squares(const float* x, std::size_t n);  // accumulated in double
}
namespace cuda {
// Adds sum(x^2) of this tensor into *device_accumulator (one float on the device): call it for
// every gradient, then read the accumulator once.
void sum_of_squares_accumulate(void* stream, float* device_accumulator, const float* x, std::size_t n);
}

// The factor that brings a gradient of global norm `norm` down to `max_norm` (1 if already below;
// max_norm <= 0 disables clipping).
inline float clip_scale(double norm, double max_norm) {
  if (max_norm <= 0 || !(norm > max_norm)) return 1.0f;
  return static_cast<float>(max_norm / (norm + 1e-6));
}
}  // namespace trainmem::kernels
