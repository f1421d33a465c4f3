#include "common/train/adamw_optimizer.h"

#include <cmath>

#include "common/device/device_ops.h"
#include "common/model/storage_type.h"
#include "kernels/adamw.h"
#include "kernels/grad_norm.h"
#include "suites/mixed_precision/master_weights.h"
#include "suites/mixed_precision/unscale.h"

namespace trainmem {

Tensor make_adam_moment(Device& device, const std::vector<std::int64_t>& shape, const std::string& name) {
  Tensor moment(device.allocator(), shape, DType::f32, MemoryCategory::optimizer_state, name);
  zero_device_memory(device, moment.data(), moment.nbytes());  // m and v start at zero
  return moment;
}

AdamWOptimizer::AdamWOptimizer(GPT& model, kernels::AdamWHyper hyper, float max_grad_norm)
    : model_(model), hyper_(hyper), max_grad_norm_(max_grad_norm) {
  if (!needs_master_weights(model.dtype())) return;
  for (Parameter& p : model.parameters()) master_.push_back(make_master_weights(model.device(), p.value, p.name));
}

double AdamWOptimizer::global_grad_norm() {
  Device& device = model_.device();
  double sum = 0;
  if (!device.cuda_pattern()) {
    if (!device.computes()) return 0;  // meta: a clean step
    with_storage_type(model_.dtype(), [&](auto tag) {
      using T = decltype(tag);
      for (Parameter& p : model_.parameters())
        sum += kernels::cpu::sum_of_squares<T>(p.grad.data_as<T>(), static_cast<std::size_t>(p.grad.numel()));
    });
  } else {
    // One float on the device collects every tensor's sum of squares; read once.
    Tensor acc(device.allocator(), {1}, DType::f32, MemoryCategory::workspace, "grad_norm.accumulator");
    zero_device_memory(device, acc.data(), acc.nbytes());
    if (device.computes())
      with_storage_type(model_.dtype(), [&](auto tag) {
        using T [[maybe_unused]] = decltype(tag);  // unused where CUDA is not compiled
        for ([[maybe_unused]] Parameter& p : model_.parameters())  // unused where CUDA is not compiled
          TRAINMEM_CUDA_KERNEL("sum_of_squares",
                               kernels::cuda::sum_of_squares_accumulate<T>(nullptr, acc.data_as<float>(), p.grad.data_as<T>(),
                                                                           static_cast<std::size_t>(p.grad.numel())));
      });
    float host = 0;
    copy_device_to_host(device, &host, acc.data(), sizeof host);
    sum = host;
  }
  return std::sqrt(sum);
}

AdamWOptimizer::StepOutcome AdamWOptimizer::step(double loss_scale) {
  // Unscale, clip and skip on overflow (suites/mixed_precision/unscale.h).
  const UnscaledStep unscaled = unscale(global_grad_norm(), loss_scale, max_grad_norm_);
  const StepOutcome outcome{unscaled.grad_norm, unscaled.skipped};
  if (unscaled.skipped) return outcome;
  Device& device = model_.device();
  auto& params = model_.parameters();
  if (m_.empty()) {
    for (Parameter& p : params) {
      m_.push_back(make_adam_moment(device, p.value.shape(), p.name + ".adam_m"));
      v_.push_back(make_adam_moment(device, p.value.shape(), p.name + ".adam_v"));
    }
  }
  const float grad_scale = unscaled.grad_scale;  // g = grad * grad_scale
  ++step_;
  const auto stream = kernel_stream(device);
  with_storage_type(model_.dtype(), [&](auto tag) {
    using T = decltype(tag);
    for (std::size_t i = 0; i < params.size(); ++i) {
      const auto n = static_cast<std::size_t>(params[i].value.numel());
      // 16 bits: the fp32 master weights (suites/mixed_precision/master_weights.h) are updated and
      // rounded once into the weights the model computes with (kernels/adamw.h).
      float* master = master_.empty() ? nullptr : master_[i].data_as<float>();
      kernels::adamw_update<T>(stream, params[i].value.data_as<T>(), params[i].grad.data_as<T>(), m_[i].data_as<float>(),
                               v_[i].data_as<float>(), n, hyper_, step_, grad_scale, master);
    }
  });
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
