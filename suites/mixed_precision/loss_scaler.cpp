#include "suites/mixed_precision/loss_scaler.h"

#include <cmath>
#include <stdexcept>

namespace trainmem {

void LossScalerOptions::validate() const {
  if (!(init_scale > 0) || !std::isfinite(init_scale))
    throw std::invalid_argument("--loss-scale must be a positive number (PyTorch's default is 65536)");
  if (!(growth_factor > 1)) throw std::invalid_argument("--loss-scale-growth must be > 1 (default 2)");
  if (!(backoff_factor > 0 && backoff_factor < 1))
    throw std::invalid_argument("--loss-scale-backoff must be between 0 and 1 (default 0.5)");
  if (growth_interval < 1) throw std::invalid_argument("--loss-scale-interval must be at least 1 (default 2000)");
}

DynamicLossScaler::DynamicLossScaler(LossScalerOptions options) : options_(options), scale_(options.init_scale) {
  options_.validate();
}

void DynamicLossScaler::after_optimizer_step(StepContext& ctx) {
  if (ctx.step_skipped) {
    scale_ *= options_.backoff_factor;
    clean_steps_ = 0;
    ++skipped_steps_;
    return;
  }
  if (++clean_steps_ == options_.growth_interval) {
    scale_ *= options_.growth_factor;
    clean_steps_ = 0;
  }
}

}  // namespace trainmem
