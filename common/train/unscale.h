// Mixed precision's core, part 2: unscaling the gradients, and skipping a step that overflowed.
//
// With loss scaling (loss_scaler.h) every gradient carries the loss scale S (and under data
// parallelism each rank's share 1/N of the mean: the optimizers pass S*N as the `divisor`). The
// optimizer takes the factor out in fp32, in the same multiply as the clipping, so the 16-bit
// gradients are never rewritten:
//
//     grad_norm  = scaled_norm / divisor                      (the norm of the true gradients)
//     grad_scale = clip(grad_norm, max_norm) / divisor        (AdamW's factor on every gradient)
//     skipped    = scaled_norm is inf or NaN                  (an overflow anywhere: no update at
//                                                              all, and the scaler backs off)
//
// Every optimizer uses this (optimizer mechanics, so in common/, as master_weights.h).
#pragma once
#include <cmath>

#include "kernels/grad_norm.h"

namespace trainmem {

struct UnscaledStep {
  double grad_norm = 0;   // of the unscaled gradients, before clipping
  float grad_scale = 1;   // unscale and clip in one factor
  bool skipped = false;   // an inf or NaN gradient: nothing may be updated
};

// `scaled_norm`: the global norm of the gradients as stored; `divisor`: the factor they carry.
inline UnscaledStep unscale(double scaled_norm, double divisor, double max_grad_norm) {
  UnscaledStep u;
  u.grad_norm = scaled_norm / divisor;
  u.skipped = !std::isfinite(scaled_norm);  // an inf or NaN anywhere makes the sum of squares inf or NaN
  if (!u.skipped) u.grad_scale = static_cast<float>(kernels::clip_scale(u.grad_norm, max_grad_norm) / divisor);
  return u;
}

}  // namespace trainmem
