#include "common/train/adamw_optimizer.h"

#include <cmath>

#include "common/device/device_ops.h"
#include "common/model/storage_type.h"
#include "common/train/sum_of_squares.h"
#include "kernels/adamw.h"
#include "common/train/master_weights.h"
#include "common/train/unscale.h"

namespace trainmem {

Tensor make_adam_moment(Device& device, const std::vector<std::int64_t>& shape, const std::string& name) {
  Tensor moment(device.allocator(), shape, DType::f32, MemoryCategory::optimizer_state, name);
  zero_device_memory(device, moment.data(), moment.nbytes());  // m and v start at zero
  return moment;
}

AdamWOptimizer::AdamWOptimizer(Model& model, kernels::AdamWHyper hyper, float max_grad_norm)
    : model_(model), hyper_(hyper), max_grad_norm_(max_grad_norm) {
  if (!needs_master_weights(model.dtype())) return;
  for (Parameter& p : model.parameters()) master_.push_back(make_master_weights(model.device(), p.value, p.name));
}

AdamWOptimizer::StepOutcome AdamWOptimizer::step(double loss_scale) {
  Device& device = model_.device();
  auto& params = model_.parameters();
  // Unscale, clip and skip on overflow (common/train/unscale.h), from the norm of the
  // gradients as stored (still scaled).
  SumOfSquares squares(device);
  for (Parameter& p : params) squares.add(p.grad.data(), static_cast<std::size_t>(p.grad.numel()), p.grad.dtype());
  const UnscaledStep unscaled = unscale(std::sqrt(squares.total()), loss_scale, max_grad_norm_);
  StepOutcome outcome{unscaled.grad_norm, unscaled.skipped};
  // Adam's moments appear at the first step, skipped or not. So the allocation sequence is the
  // same whatever the gradients hold, and a meta run (which computes nothing, so never skips)
  // follows a run whose first fp16 steps overflow to the byte. (PyTorch's Adam makes them at the
  // first step() GradScaler does not skip: the same bytes, later in the sequence.)
  if (m_.empty()) {
    for (Parameter& p : params) {
      m_.push_back(make_adam_moment(device, p.value.shape(), p.name + ".adam_m"));
      v_.push_back(make_adam_moment(device, p.value.shape(), p.name + ".adam_v"));
    }
  }
  if (unscaled.skipped) return outcome;
  const float grad_scale = unscaled.grad_scale;  // g = grad * grad_scale
  ++step_;
  const auto stream = kernel_stream(device);
  with_storage_type(model_.dtype(), [&](auto tag) {
    using T = decltype(tag);
    for (std::size_t i = 0; i < params.size(); ++i) {
      const auto n = static_cast<std::size_t>(params[i].value.numel());
      // 16 bits: the fp32 master weights (common/train/master_weights.h) are updated and
      // rounded once into the weights the model computes with (kernels/adamw.h).
      float* master = master_.empty() ? nullptr : master_[i].data_as<float>();
      kernels::adamw_update<T>(stream, params[i].value.data_as<T>(), params[i].grad.data_as<T>(), m_[i].data_as<float>(),
                               v_[i].data_as<float>(), n, hyper_, step_, grad_scale, master);
    }
  });
  // The weights the update wrote, and their master copy: an inf or NaN in any makes the sum so.
  squares.reset();
  for (std::size_t i = 0; i < params.size(); ++i) {
    squares.add(params[i].value.data(), static_cast<std::size_t>(params[i].value.numel()), params[i].value.dtype());
    if (!master_.empty()) squares.add(master_[i].data(), static_cast<std::size_t>(master_[i].numel()), DType::f32);
  }
  outcome.weights_finite = std::isfinite(squares.total());
  return outcome;
}

std::vector<float> AdamWOptimizer::master_values() const {
  std::vector<float> out;
  for (const Tensor& t : master_) {
    const std::size_t offset = out.size();
    out.resize(offset + static_cast<std::size_t>(t.numel()));
    copy_device_to_host(model_.device(), out.data() + offset, t.data(), t.nbytes());
  }
  return out;
}

}  // namespace trainmem
