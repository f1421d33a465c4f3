#include "common/sharding/sharded_adamw.h"

#include <cmath>
#include <cstddef>
#include <cstring>
#include <stdexcept>

#include "common/allocator/allocator_config.h"
#include "common/device/cost_log.h"
#include "common/device/device.h"
#include "common/device/device_ops.h"
#include "common/model/storage_type.h"
#include "common/train/adamw_optimizer.h"
#include "common/train/sum_of_squares.h"
#include "kernels/convert.h"
#include "kernels/grad_norm.h"
#include "common/train/master_weights.h"
#include "common/train/unscale.h"

namespace trainmem {

// One registered slice and its optimizer state: on the device (Offload::none) or on the host.
struct ShardedAdamW::Shard {
  std::string name;
  void* param = nullptr;  // device memory; host memory with Offload::params
  GradientAt grad_at;     // where the gradient is now (device memory)
  std::size_t count = 0;
  DType dtype = DType::f32;

  Tensor master, m, v;  // device state; master only for a 16-bit model
  // Host state (offload; none on the meta device, which counts it: host_state_bytes).
  std::vector<float> host_master, host_m, host_v, host_grad;

  void* grad() const {
    void* g = grad_at();
    if (g == nullptr) throw std::logic_error("ShardedAdamW: shard " + name + " has no gradient at the optimizer step");
    return g;
  }
  // The caller's buffers seen as tensors (for the device copies and conversions).
  Tensor grad_tensor() const { return Tensor::view(grad(), {static_cast<std::int64_t>(count)}, dtype, MemoryCategory::gradients, name + ".grad"); }
  Tensor param_tensor() const { return Tensor::view(param, {static_cast<std::int64_t>(count)}, dtype, MemoryCategory::parameters, name); }
};

ShardedAdamW::ShardedAdamW(Device& device, Communicator& comm, kernels::AdamWHyper hyper, float max_grad_norm,
                           Offload offload)
    : device_(device), comm_(comm), hyper_(hyper), max_grad_norm_(max_grad_norm), offload_(offload) {}

ShardedAdamW::~ShardedAdamW() = default;

namespace {
// 16-bit storage -> fp32 on the host (exact), and back (round to nearest even), as kernels/convert.h.
void host_widen(float* out, const void* in, std::size_t n, DType dtype) {
  if (dtype == DType::f32) std::memcpy(out, in, n * sizeof(float));
  else if (dtype == DType::bf16) kernels::cpu::from_bf16(out, static_cast<const std::uint16_t*>(in), n);
  else kernels::cpu::from_fp16(out, static_cast<const std::uint16_t*>(in), n);
}
void host_narrow(void* out, const float* in, std::size_t n, DType dtype) {
  if (dtype == DType::f32) std::memcpy(out, in, n * sizeof(float));
  else if (dtype == DType::bf16) kernels::cpu::to_bf16(static_cast<std::uint16_t*>(out), in, n);
  else kernels::cpu::to_fp16(static_cast<std::uint16_t*>(out), in, n);
}
}  // namespace

// A device tensor's values, widened to fp32 on the host (its raw bytes copied first).
void ShardedAdamW::copy_to_host_widened(float* out, const Tensor& t) {
  const auto n = static_cast<std::size_t>(t.numel());
  std::vector<std::byte> stored(n * dtype_size(t.dtype()));
  copy_device_to_host(device_, stored.data(), t.data(), stored.size());
  host_widen(out, stored.data(), n, t.dtype());
}

void ShardedAdamW::add_shard(void* param, void* grad, std::size_t count, DType dtype, const std::string& name) {
  add_shard(param, [grad] { return grad; }, count, dtype, name);
}

void ShardedAdamW::add_shard(void* param, GradientAt grad, std::size_t count, DType dtype, const std::string& name) {
  if (dtype != DType::f32 && dtype != DType::bf16 && dtype != DType::f16)
    throw std::invalid_argument("ShardedAdamW::add_shard(" + name + "): parameters must be f32, bf16 or f16");
  if (count == 0) throw std::invalid_argument("ShardedAdamW::add_shard(" + name + "): empty shard");
  Shard s;
  s.name = name;
  s.param = param;
  s.grad_at = std::move(grad);
  s.count = count;
  s.dtype = dtype;
  const auto n = static_cast<std::int64_t>(count);
  if (offload_ == Offload::none) {
    // m and v start at zero; a 16-bit model's master weights start as its weights, widened.
    s.m = make_adam_moment(device_, {n}, name + ".adam_m");
    s.v = make_adam_moment(device_, {n}, name + ".adam_v");
    s.master = make_master_weights(device_, s.param_tensor(), name);  // 16 bits (suites/mixed_precision)
  } else if (device_.computes()) {
    // On the meta device nothing is computed, so the host state is never allocated: it would grow
    // with the model (16 bytes an element) on a run that must hold no memory in proportion to it.
    s.host_master.resize(count);
    s.host_m.assign(count, 0.0f);
    s.host_v.assign(count, 0.0f);
    s.host_grad.resize(count);
    if (offload_ == Offload::params) {
      host_widen(s.host_master.data(), param, count, dtype);  // the shard is already on the host
    } else {
      copy_to_host_widened(s.host_master.data(), s.param_tensor());
    }
  }
  shards_.push_back(std::move(s));
}

ShardedAdamW::StepOutcome ShardedAdamW::step(double loss_scale) {
  StepOutcome outcome;
  // Every rank gets the same sum of g^2 over the gradient shards (as stored: still scaled), so
  // every rank makes the same decisions below.
  SumOfSquares squares(device_);
  for (Shard& s : shards_) squares.add(s.grad(), s.count, s.dtype);
  const double scaled_norm = std::sqrt(comm_.all_reduce_sum(squares.total()));
  // The gradients carry the loss scale and are a sum over N ranks of per-rank means (header).
  // Unscale, average and clip in one factor; an inf or NaN on any rank: no rank updates
  // (common/train/unscale.h).
  const UnscaledStep unscaled = unscale(scaled_norm, loss_scale * static_cast<double>(comm_.world_size()), max_grad_norm_);
  outcome.grad_norm = unscaled.grad_norm;
  outcome.skipped = unscaled.skipped;
  if (unscaled.skipped) return outcome;
  ++step_;
  for (Shard& s : shards_) update(s, step_, unscaled.grad_scale);  // g = grad * grad_scale
  // This rank's weights and master weights after the update (a rank with an inf or NaN fails,
  // which ends every rank).
  squares.reset();
  bool host_finite = true;
  for (Shard& s : shards_) {
    if (offload_ == Offload::none) {
      squares.add(s.param, s.count, s.dtype);
      if (needs_master_weights(s.dtype)) squares.add(s.master.data(), s.count, DType::f32);
    } else {
      for (float w : s.host_master) host_finite = host_finite && std::isfinite(w);
    }
  }
  outcome.weights_finite = host_finite && std::isfinite(squares.total());
  return outcome;
}

void ShardedAdamW::update_shard(std::size_t index, long step, float grad_scale) {
  update(shards_.at(index), step, grad_scale);
}

void ShardedAdamW::update(Shard& s, long step, float grad_scale) {
  if (offload_ == Offload::none) {
    // fp32 weights are their own master copy, updated in place; 16-bit weights: the fp32 master
    // weights are updated and rounded once into them (kernels/adamw.h).
    with_storage_type(s.dtype, [&](auto tag) {
      using T = decltype(tag);
      float* master = needs_master_weights(s.dtype) ? s.master.data_as<float>() : nullptr;
      kernels::adamw_update<T>(kernel_stream(device_), static_cast<T*>(s.param), static_cast<const T*>(s.grad()),
                               s.m.data_as<float>(), s.v.data_as<float>(), s.count, hyper_, step, grad_scale, master);
    });
    return;
  }
  // Offload: the gradient to the host (widened there), Adam on the CPU, weights back. On the meta
  // device there is no host state and nothing to compute (the update allocates no device memory):
  // only the costs are declared, the copies and the host's update (cost_log.h).
  const double n = static_cast<double>(s.count), bytes = n * static_cast<double>(dtype_size(s.dtype));
  // Adam on fp32 master weights: reads master, grad, m, v and writes master, m, v (7 x 4 bytes),
  // with the widening of the gradient and the rounding of the weights.
  const kernels::KernelCall host_adam{"host_adamw_update", kernels::KernelClass::memory, kernels::KernelDType::f32,
                                      12.0 * n, 28.0 * n};
  if (!device_.computes()) {
    if (CostLog* log = device_.cost_log()) {
      log->copy(CopyDirection::device_to_host, bytes, 0);
      log->host_work(host_adam, 0);
      if (offload_ != Offload::params) log->copy(CopyDirection::host_to_device, bytes, 0);
    }
    return;
  }
  copy_to_host_widened(s.host_grad.data(), s.grad_tensor());
  {
    HostWork work(device_.cost_log(), host_adam);
    kernels::cpu::adamw_update(s.host_master.data(), s.host_grad.data(), s.host_m.data(), s.host_v.data(), s.count,
                               hyper_, step, grad_scale);
  }
  if (offload_ == Offload::params) {
    host_narrow(s.param, s.host_master.data(), s.count, s.dtype);
  } else {
    std::vector<std::byte> stored(s.count * dtype_size(s.dtype));  // rounded on the host, then copied
    host_narrow(stored.data(), s.host_master.data(), s.count, s.dtype);
    copy_host_to_device(device_, s.param, stored.data(), stored.size());
  }
}

std::vector<float> ShardedAdamW::master_values(std::size_t index) {
  const Shard& s = shards_.at(index);
  if (offload_ != Offload::none) return s.host_master;
  std::vector<float> out(s.count);
  if (s.dtype == DType::f32) copy_to_host_widened(out.data(), s.param_tensor());
  else copy_to_host_widened(out.data(), s.master);
  return out;
}

std::size_t ShardedAdamW::device_state_bytes() const {
  std::size_t bytes = 0;
  for (const Shard& s : shards_)
    for (const Tensor* t : {&s.master, &s.m, &s.v})
      if (t->data() != nullptr) bytes += round_size(t->nbytes());
  return bytes;
}

std::size_t ShardedAdamW::host_state_bytes() const {
  if (offload_ == Offload::none) return 0;
  // Counted from the shards, not from the vectors: on the meta device they are never allocated.
  constexpr std::size_t kHostFloatsPerElement = 4;  // master, m, v, the fp32 gradient
  std::size_t bytes = 0;
  for (const Shard& s : shards_) bytes += kHostFloatsPerElement * sizeof(float) * s.count;
  return bytes;
}

}  // namespace trainmem
