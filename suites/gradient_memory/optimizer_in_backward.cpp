#include "suites/gradient_memory/optimizer_in_backward.h"

#include "common/device/device_ops.h"
#include "common/model/storage_type.h"
#include "common/train/adamw_optimizer.h"
#include "common/train/master_weights.h"

namespace trainmem::gradient_memory {

OptimizerInBackward::OptimizerInBackward(Model& model, kernels::AdamWHyper hyper)
    : model_(model), table_(model.config()), hyper_(hyper), master_(model.parameters().size()), m_(model.parameters().size()),
      v_(model.parameters().size()) {
  model.release_gradients();
  for (std::size_t i = 0; i < model.parameters().size(); ++i) {
    Parameter& p = model.parameters()[i];
    master_[i] = make_master_weights(model.device(), p.value, p.name);  // empty for fp32
  }
}

void OptimizerInBackward::update(std::size_t index, long step) {
  Parameter& p = model_.parameters()[index];
  Device& device = model_.device();
  if (m_[index].data() == nullptr) {  // Adam's moments at the parameter's first update
    m_[index] = make_adam_moment(device, p.value.shape(), p.name + ".adam_m");
    v_[index] = make_adam_moment(device, p.value.shape(), p.name + ".adam_v");
  }
  with_storage_type(model_.dtype(), [&](auto tag) {
    using T = decltype(tag);
    float* master = needs_master_weights(model_.dtype()) ? master_[index].data_as<float>() : nullptr;
    kernels::adamw_update<T>(kernel_stream(device), p.value.data_as<T>(), p.grad.data_as<T>(), m_[index].data_as<float>(),
                             v_[index].data_as<float>(), static_cast<std::size_t>(p.value.numel()), hyper_, step,
                             /*grad_scale=*/1.0f, master);
  });
  p.grad.reset();  // the gradient is spent: freed now, not after the step
}

void OptimizerInBackward::after_layer_backward(StepContext& ctx, std::size_t layer) {
  for (std::size_t index : table_.layer_indices(layer)) update(index, ctx.step);
}

void OptimizerInBackward::after_backward(StepContext& ctx) {
  for (std::size_t index : table_.root_indices()) update(index, ctx.step);
}

Optimizer::StepOutcome OptimizerInBackward::step(double /*loss_scale*/) {
  ++steps_;
  return {};
}

}  // namespace trainmem::gradient_memory
