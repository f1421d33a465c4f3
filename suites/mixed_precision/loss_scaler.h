// Dynamic loss scaling for fp16 training (Micikevicius et al. 2018; PyTorch's GradScaler).
//
// fp16 cannot hold magnitudes below 6e-8 (2^-24, its smallest subnormal), and many gradients are
// that small: they would round to zero. So the loss is multiplied by a scale S before backward —
// every gradient is then S times larger, inside fp16's range — and the optimizer divides by S
// again in fp32 (AdamWOptimizer::step(loss_scale)). S is chosen dynamically:
//
//   a step whose gradients contain inf or NaN (S too large: something overflowed 65504)
//       -> the step is skipped (no update) and S *= backoff_factor (0.5)
//   growth_interval (2000) clean steps in a row
//       -> S *= growth_factor (2), to use as much of the range as is safe
//
// Initial S = 2^16, as PyTorch. bf16 has fp32's exponent range and needs no scaling.
//
// S stays in [2^-24, 2^64] (kMinScale, kMaxScale): a back-off or growth that would leave it is
// clamped, so S and 1/S are always normal floats (the optimizer's factor 1/S stays finite). Each
// factor moves S by at most 2^16 per change, so a flag cannot throw it across the range at once.
#pragma once
#include <string>

#include "common/train/strategy.h"

namespace trainmem {

struct LossScalerOptions {
  // The ranges of the options (the flags state them too: mixed_precision_technique.cpp).
  static constexpr double kMinScale = 0x1p-24, kMaxScale = 0x1p64;  // init_scale, and S always
  static constexpr double kMaxGrowth = 0x1p16;                       // growth_factor in (1, 2^16]
  static constexpr double kMinBackoff = 0x1p-16;                     // backoff_factor in [2^-16, 1)
  static constexpr long kMaxInterval = 1000000000;                   // growth_interval in [1, 10^9]

  double init_scale = 65536.0;  // 2^16
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  long growth_interval = 2000;  // clean steps in a row before the scale grows

  void validate() const;  // throws std::invalid_argument naming the option to change
};

class DynamicLossScaler : public Strategy {
 public:
  explicit DynamicLossScaler(LossScalerOptions options = {});
  std::string name() const override { return "loss_scaler"; }
  double loss_scale() const override { return scale_; }
  void after_optimizer_step(StepContext& ctx) override;  // backs off or grows

  const LossScalerOptions& options() const { return options_; }
  long clean_steps() const { return clean_steps_; }  // since the last change of scale
  long skipped_steps() const { return skipped_steps_; }

 private:
  LossScalerOptions options_;
  double scale_;
  long clean_steps_ = 0;
  long skipped_steps_ = 0;
};

}  // namespace trainmem
