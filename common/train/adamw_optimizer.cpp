#include "common/train/adamw_optimizer.h"

#include <cmath>

#include "common/device/device_ops.h"
#include "kernels/grad_norm.h"

namespace trainmem {

AdamWOptimizer::AdamWOptimizer(GPT& model, kernels::AdamWHyper hyper, float max_grad_norm)
    : model_(model), hyper_(hyper), max_grad_norm_(max_grad_norm) {}

double AdamWOptimizer::global_grad_norm() {
  Device& device = model_.device();
  double sum = 0;
  if (device.kind() == DeviceKind::cpu) {
    for (Parameter& p : model_.parameters())
      sum += kernels::cpu::sum_of_squares(p.grad.data_as<float>(), static_cast<std::size_t>(p.grad.numel()));
  } else {
    // One float on the device collects every tensor's sum of squares; read once.
    Tensor acc(device.allocator(), {1}, DType::f32, MemoryCategory::workspace, "grad_norm.accumulator");
    zero_device_memory(device, acc.data(), acc.nbytes());
    for ([[maybe_unused]] Parameter& p : model_.parameters())  // unused where CUDA is not compiled
      TRAINMEM_CUDA_KERNEL("sum_of_squares", kernels::cuda::sum_of_squares_accumulate(
                                                 nullptr, acc.data_as<float>(), p.grad.data_as<float>(),
                                                 static_cast<std::size_t>(p.grad.numel())));
    float host = 0;
    copy_device_to_host(device, &host, acc.data(), sizeof host);
    sum = host;
  }
  return std::sqrt(sum);
}

double AdamWOptimizer::step() {
  Device& device = model_.device();
  auto& params = model_.parameters();
  if (m_.empty()) {
    for (Parameter& p : params) {
      m_.emplace_back(device.allocator(), p.value.shape(), DType::f32, MemoryCategory::optimizer_state, p.name + ".adam_m");
      v_.emplace_back(device.allocator(), p.value.shape(), DType::f32, MemoryCategory::optimizer_state, p.name + ".adam_v");
      zero_device_memory(device, m_.back().data(), m_.back().nbytes());
      zero_device_memory(device, v_.back().data(), v_.back().nbytes());
    }
  }
  const double norm = global_grad_norm();
  const float scale = kernels::clip_scale(norm, max_grad_norm_);
  ++step_;
  const auto stream = kernel_stream(device);
  for (std::size_t i = 0; i < params.size(); ++i)
    kernels::adamw_update(stream, params[i].value.data_as<float>(), params[i].grad.data_as<float>(),
                          m_[i].data_as<float>(), v_[i].data_as<float>(), static_cast<std::size_t>(params[i].value.numel()),
                          hyper_, step_, scale);
  return norm;
}

}  // namespace trainmem
