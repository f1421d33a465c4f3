#include "suites/mixed_precision/loss_scaler.h"

#include <algorithm>
#include <stdexcept>

namespace trainmem {

void LossScalerOptions::validate() const {
  if (!(init_scale >= kMinScale && init_scale <= kMaxScale))
    throw std::invalid_argument("--loss-scale must be between 2^-24 and 2^64 (PyTorch's default is 65536)");
  if (!(growth_factor > 1 && growth_factor <= kMaxGrowth))
    throw std::invalid_argument("--loss-scale-growth must be more than 1 and at most 65536 (default 2)");
  if (!(backoff_factor >= kMinBackoff && backoff_factor < 1))
    throw std::invalid_argument("--loss-scale-backoff must be at least 2^-16 and less than 1 (default 0.5)");
  if (growth_interval < 1 || growth_interval > kMaxInterval)
    throw std::invalid_argument("--loss-scale-interval must be between 1 and 10^9 (default 2000)");
}

DynamicLossScaler::DynamicLossScaler(LossScalerOptions options) : options_(options), scale_(options.init_scale) {
  options_.validate();
}

void DynamicLossScaler::after_optimizer_step(StepContext& ctx) {
  if (ctx.step_skipped) {
    scale_ = std::max(scale_ * options_.backoff_factor, LossScalerOptions::kMinScale);
    clean_steps_ = 0;
    ++skipped_steps_;
    return;
  }
  if (++clean_steps_ == options_.growth_interval) {
    scale_ = std::min(scale_ * options_.growth_factor, LossScalerOptions::kMaxScale);
    clean_steps_ = 0;
  }
}

}  // namespace trainmem
