#include "suites/zero/zero_strategy.h"

#include <cstddef>
#include <stdexcept>

#include "common/device/device_ops.h"
#include "common/train/adamw_optimizer.h"
#include "common/train/trainer.h"

namespace trainmem::zero {

void validate(const ZeroOptions& options) {
  if (options.stage < 0 || options.stage > 3)
    throw std::invalid_argument("--zero must be 0, 1, 2 or 3, not " + std::to_string(options.stage));
  if (options.offload != Offload::none && options.stage < 1)
    throw std::invalid_argument("--offload " + to_string(options.offload) +
                                " needs --zero 1, 2 or 3: stage 0 keeps every state on every rank, there is no shard to offload");
  if (options.offload == Offload::params && options.stage != 3)
    throw std::invalid_argument("--offload params needs --zero 3: only stage 3 partitions the parameters "
                                "(use --offload optimizer with stages 1 and 2)");
}

namespace {

// Stage 0's optimizer: AdamWOptimizer on every rank over all-reduced gradients, with the factor
// ShardedAdamW uses (loss_scale * N: the trainer's factor includes the strategy's 1/N share, see
// zero_strategy.h), so that both optimizers see the same arithmetic.
class DataParallelAdamW : public Optimizer {
 public:
  DataParallelAdamW(AdamWOptimizer& adamw, int world_size) : adamw_(adamw), world_size_(world_size) {}
  StepOutcome step(double loss_scale) override { return adamw_.step(loss_scale * world_size_); }
  long steps_taken() const override { return adamw_.steps_taken(); }

 private:
  AdamWOptimizer& adamw_;
  int world_size_;
};

std::byte* bytes(void* p) { return static_cast<std::byte*>(p); }

}  // namespace

// What each unit holds, by stage (all device tensors unless noted):
struct ZeroStrategy::UnitBuffers {
  Tensor full_values;                       // 1, 2: the unit's flat parameters (every rank whole)
  Tensor full_grads;                        // 1: the unit's flat gradients
  Tensor value_shard;                       // 3: this rank's slice of the parameters
  std::vector<std::byte> host_value_shard;  // 3 with --offload params: the slice, on the host
  Tensor grad_shard;                        // 2, 3: this rank's slice of the gradients
  Tensor gathered;                          // 3: the whole unit while in use (communication)
  Tensor bucket;                            // 2, 3: the unit's full gradients in backward (communication)
};

ZeroStrategy::ZeroStrategy(GPT& model, Communicator& comm, ZeroOptions options)
    : model_(model), comm_(comm), options_(options), dtype_(model.dtype()), element_size_(dtype_size(model.dtype())) {
  validate(options_);
  Device& device = model_.device();
  layout_ = std::make_unique<ZeroLayout>(model_, comm_.world_size());
  if (options_.stage == 0) {
    replicated_adamw_ = std::make_unique<AdamWOptimizer>(model_, options_.adam, options_.max_grad_norm);
    data_parallel_adamw_ = std::make_unique<DataParallelAdamW>(*replicated_adamw_, comm_.world_size());
    optimizer_ = data_parallel_adamw_.get();
    return;
  }
  for (const Parameter& p : model_.parameters()) shapes_.push_back(p.value.shape());
  buffers_.resize(layout_->units().size());
  sharded_adamw_ = std::make_unique<ShardedAdamW>(device, comm_, options_.adam, options_.max_grad_norm, options_.offload);
  CachingAllocator& allocator = device.allocator();
  const std::size_t e = element_size_;
  const int stage = options_.stage;

  for (std::size_t ui = 0; ui < layout_->units().size(); ++ui) {
    const ZeroUnit& u = layout_->units()[ui];
    UnitBuffers& b = buffers_[ui];
    const auto P = static_cast<std::int64_t>(u.padded), S = static_cast<std::int64_t>(u.shard);

    // The unit as one flat vector: the model's tensors one after the other, zero padding.
    Tensor flat(allocator, {P}, dtype_, MemoryCategory::parameters, u.name + ".flat_params");
    zero_device_memory(device, flat.data(), flat.nbytes());
    for (std::size_t k = 0; k < u.params.size(); ++k) {
      const Tensor& value = model_.parameters()[u.params[k]].value;
      copy_device_to_device(device, bytes(flat.data()) + u.offsets[k] * e, value.data(), value.nbytes());
    }
    if (stage <= 2) {
      b.full_values = std::move(flat);
      point_values(u, b.full_values.data());  // the model's own tensors are freed here
    } else if (options_.offload == Offload::params) {
      b.host_value_shard.resize(u.shard * e);
      copy_device_to_host(device, b.host_value_shard.data(), my_slice(flat.data(), u), u.shard * e);
      release_values(u);
    } else {
      b.value_shard = Tensor(allocator, {S}, dtype_, MemoryCategory::parameters, u.name + ".param_shard");
      copy_device_to_device(device, b.value_shard.data(), my_slice(flat.data(), u), u.shard * e);
      release_values(u);
    }

    if (stage == 1) {
      b.full_grads = Tensor(allocator, {P}, dtype_, MemoryCategory::gradients, u.name + ".flat_grads");
      zero_device_memory(device, b.full_grads.data(), b.full_grads.nbytes());
      point_grads(u, b.full_grads.data());
    } else {
      b.grad_shard = Tensor(allocator, {S}, dtype_, MemoryCategory::gradients, u.name + ".grad_shard");
      zero_device_memory(device, b.grad_shard.data(), b.grad_shard.nbytes());
      release_grads(u);
    }

    // The optimizer updates this rank's slice of the unit, wherever the slice lives.
    void* param_shard = stage <= 2 ? my_slice(b.full_values.data(), u)
                        : options_.offload == Offload::params ? static_cast<void*>(b.host_value_shard.data())
                                                              : b.value_shard.data();
    void* grad_shard = stage == 1 ? my_slice(b.full_grads.data(), u) : b.grad_shard.data();
    sharded_adamw_->add_shard(param_shard, grad_shard, u.shard, dtype_, u.name);
  }
  optimizer_ = sharded_adamw_.get();
  // The set-up's copies are not training: a real run builds the model sharded (header).
  allocator.reset_peak_stats();
}

ZeroStrategy::~ZeroStrategy() = default;

std::string ZeroStrategy::name() const {
  std::string s = "zero-";
  s += std::to_string(options_.stage);
  return s;
}

bool ZeroStrategy::last_micro_step(const StepContext& ctx) const {
  return ctx.micro_step + 1 == ctx.trainer.options().accumulation_steps;
}

// ---------------------------------------------------------------------------------------------
// model tensors <-> flat buffers
// ---------------------------------------------------------------------------------------------

void* ZeroStrategy::my_slice(void* flat, const ZeroUnit& u) const {
  return bytes(flat) + static_cast<std::size_t>(comm_.rank()) * u.shard * element_size_;
}

void ZeroStrategy::point_values(const ZeroUnit& u, void* flat) {
  for (std::size_t k = 0; k < u.params.size(); ++k) {
    Parameter& p = model_.parameters()[u.params[k]];
    p.value = Tensor::view(bytes(flat) + u.offsets[k] * element_size_, shapes_[u.params[k]], dtype_,
                           MemoryCategory::parameters, p.name);
  }
}

void ZeroStrategy::point_grads(const ZeroUnit& u, void* flat) {
  for (std::size_t k = 0; k < u.params.size(); ++k) {
    Parameter& p = model_.parameters()[u.params[k]];
    p.grad = Tensor::view(bytes(flat) + u.offsets[k] * element_size_, shapes_[u.params[k]], dtype_,
                          MemoryCategory::gradients, p.name + ".grad");
  }
}

void ZeroStrategy::release_values(const ZeroUnit& u) {
  for (std::size_t i : u.params) model_.parameters()[i].value.reset();
}

void ZeroStrategy::release_grads(const ZeroUnit& u) {
  for (std::size_t i : u.params) model_.parameters()[i].grad.reset();
}

// ---------------------------------------------------------------------------------------------
// the collectives
// ---------------------------------------------------------------------------------------------

// Stage 0: every gradient tensor of the unit, summed over the ranks in place (volume 2 * bytes).
void ZeroStrategy::all_reduce_gradients(const ZeroUnit& u) {
  for (std::size_t i : u.params) {
    Tensor& g = model_.parameters()[i].grad;
    comm_.all_reduce(g.data(), static_cast<std::size_t>(g.numel()), dtype_, MemoryCategory::gradients);
  }
}

// Stage 3: the whole unit from every rank's slice (volume P_u * e), viewed by the model's tensors.
void ZeroStrategy::gather(std::size_t ui) {
  const ZeroUnit& u = layout_->units()[ui];
  UnitBuffers& b = buffers_[ui];
  Device& device = model_.device();
  b.gathered = Tensor(device.allocator(), {static_cast<std::int64_t>(u.padded)}, dtype_, MemoryCategory::communication,
                      u.name + ".gathered_params");
  void* mine = my_slice(b.gathered.data(), u);  // in place: this rank's slice first, then the others'
  if (options_.offload == Offload::params)
    copy_host_to_device(device, mine, b.host_value_shard.data(), u.shard * element_size_);
  else
    copy_device_to_device(device, mine, b.value_shard.data(), u.shard * element_size_);
  comm_.all_gather(mine, b.gathered.data(), u.shard, dtype_, MemoryCategory::parameters);
  point_values(u, b.gathered.data());
}

void ZeroStrategy::release_gathered(std::size_t ui) {
  release_values(layout_->units()[ui]);
  buffers_[ui].gathered.reset();
}

// Stages 2-3: the unit's full gradients for this micro-batch's backward. Zero, except this rank's
// slice, which starts as the shard accumulated over the step's earlier micro-batches: the
// reduce-scatter then adds it in (only this rank contributes it).
void ZeroStrategy::open_bucket(std::size_t ui) {
  const ZeroUnit& u = layout_->units()[ui];
  UnitBuffers& b = buffers_[ui];
  Device& device = model_.device();
  b.bucket = Tensor(device.allocator(), {static_cast<std::int64_t>(u.padded)}, dtype_, MemoryCategory::communication,
                    u.name + ".grad_bucket");
  zero_device_memory(device, b.bucket.data(), b.bucket.nbytes());
  copy_device_to_device(device, my_slice(b.bucket.data(), u), b.grad_shard.data(), u.shard * element_size_);
  point_grads(u, b.bucket.data());
}

// grad_shard = sum over ranks of slice r of their buckets (volume P_u * e); the bucket goes.
void ZeroStrategy::reduce_scatter_bucket(std::size_t ui) {
  const ZeroUnit& u = layout_->units()[ui];
  UnitBuffers& b = buffers_[ui];
  void* mine = my_slice(b.bucket.data(), u);
  comm_.reduce_scatter(b.bucket.data(), mine, u.shard, dtype_, MemoryCategory::gradients);
  copy_device_to_device(model_.device(), b.grad_shard.data(), mine, u.shard * element_size_);
  release_grads(u);
  b.bucket.reset();
}

// ---------------------------------------------------------------------------------------------
// the hooks
// ---------------------------------------------------------------------------------------------

void ZeroStrategy::on_data_fetch(StepContext&) {
  if (options_.stage >= 3) gather(0);      // the root unit, for the whole micro-step
  if (options_.stage >= 2) open_bucket(0);  // wte's gradient is written at both ends
}

void ZeroStrategy::before_layer_forward(StepContext&, std::size_t layer) {
  if (options_.stage >= 3) gather(index_of_layer(layer));
}

void ZeroStrategy::after_layer_forward(StepContext&, std::size_t layer) {
  if (options_.stage >= 3) release_gathered(index_of_layer(layer));
}

void ZeroStrategy::before_layer_backward(StepContext&, std::size_t layer) {
  if (options_.stage >= 3) gather(index_of_layer(layer));
  if (options_.stage >= 2) open_bucket(index_of_layer(layer));
}

void ZeroStrategy::after_layer_backward(StepContext& ctx, std::size_t layer) {
  if (options_.stage == 0 && last_micro_step(ctx)) {
    // DDP: a layer's gradients are complete; on a GPU this reduction overlaps the next layer's backward.
    all_reduce_gradients(unit_of_layer(layer));
  }
  if (options_.stage >= 2) reduce_scatter_bucket(index_of_layer(layer));
  if (options_.stage >= 3) release_gathered(index_of_layer(layer));
}

void ZeroStrategy::after_backward(StepContext& ctx) {
  if (options_.stage == 0 && last_micro_step(ctx)) all_reduce_gradients(layout_->root());
  if (options_.stage >= 2) reduce_scatter_bucket(0);
  if (options_.stage >= 3) release_gathered(0);
}

void ZeroStrategy::before_optimizer_step(StepContext&) {
  if (options_.stage != 1) return;
  // Stage 1: this rank's slice of each unit's summed gradients, in place (volume P_u * e).
  for (std::size_t ui = 0; ui < layout_->units().size(); ++ui) {
    const ZeroUnit& u = layout_->units()[ui];
    void* flat = buffers_[ui].full_grads.data();
    comm_.reduce_scatter(flat, my_slice(flat, u), u.shard, dtype_, MemoryCategory::gradients);
  }
}

void ZeroStrategy::after_optimizer_step(StepContext&) {
  if (options_.stage == 0) return;
  Device& device = model_.device();
  for (std::size_t ui = 0; ui < layout_->units().size(); ++ui) {
    const ZeroUnit& u = layout_->units()[ui];
    UnitBuffers& b = buffers_[ui];
    // Stages 1-2: every rank updated its slice; gather the whole unit again (volume P_u * e).
    if (options_.stage <= 2) {
      void* flat = b.full_values.data();
      comm_.all_gather(my_slice(flat, u), flat, u.shard, dtype_, MemoryCategory::parameters);
    }
    // Gradients start from zero for the next step (the whole flat buffer: padding and the other
    // ranks' slices, which the in-place reduce-scatter may have left written).
    if (options_.stage == 1) zero_device_memory(device, b.full_grads.data(), b.full_grads.nbytes());
    else zero_device_memory(device, b.grad_shard.data(), b.grad_shard.nbytes());
  }
}

// ---------------------------------------------------------------------------------------------

std::vector<float> ZeroStrategy::parameter_values() {
  if (options_.stage < 3) return model_.parameter_values();
  for (std::size_t ui = 0; ui < buffers_.size(); ++ui) gather(ui);
  std::vector<float> values = model_.parameter_values();
  for (std::size_t ui = 0; ui < buffers_.size(); ++ui) release_gathered(ui);
  return values;
}

std::size_t ZeroStrategy::host_bytes() const {
  std::size_t n = sharded_adamw_ ? sharded_adamw_->host_state_bytes() : 0;
  for (const UnitBuffers& b : buffers_) n += b.host_value_shard.size();
  return n;
}

}  // namespace trainmem::zero
