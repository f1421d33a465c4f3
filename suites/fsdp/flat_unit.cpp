#include "suites/fsdp/flat_unit.h"

#include <algorithm>
#include <stdexcept>

#include "common/device/device_ops.h"

namespace trainmem::fsdp {

namespace {
char* at(Tensor& t, std::size_t element, DType dtype) { return static_cast<char*>(t.data()) + element * dtype_size(dtype); }
}  // namespace

FlatUnit::FlatUnit(GPT& model, Communicator& comm, UnitLayout layout, std::vector<std::size_t> parameter_indices,
                   ShardingMode mode)
    : model_(model), comm_(comm), layout_(std::move(layout)), mode_(mode) {
  std::vector<Parameter>& params = model_.parameters();
  std::size_t offset = 0;
  for (std::size_t i : parameter_indices) {
    const auto n = static_cast<std::size_t>(params.at(i).value.numel());
    slots_.push_back({i, params[i].value.shape(), offset, n});
    offset += n;
  }
  if (offset != layout_.numel)
    throw std::logic_error("FSDP unit " + layout_.name + ": the model's parameters hold " + std::to_string(offset) +
                           " elements, the layout says " + std::to_string(layout_.numel));

  Device& device = model_.device();
  CachingAllocator& allocator = device.allocator();
  const DType dtype = model_.dtype();
  const std::size_t b = dtype_size(dtype);
  const auto S = static_cast<std::int64_t>(layout_.shard_numel);

  if (mode_ == ShardingMode::none) {
    // The whole flat vector, for good: copy every parameter in, then let the model view it.
    gathered_ = Tensor(allocator, {S}, dtype, MemoryCategory::parameters, layout_.name + ".flat");
    full_grad_ = Tensor(allocator, {S}, dtype, MemoryCategory::gradients, layout_.name + ".flat.grad");
    zero_device_memory(device, full_grad_.data(), full_grad_.nbytes());
    for (const Slot& s : slots_)
      copy_device_to_device(device, at(gathered_, s.offset, dtype), params[s.index].value.data(), s.numel * b);
    for (const Slot& s : slots_) {
      params[s.index].value.reset();
      params[s.index].grad.reset();
    }
    point_values_at(gathered_);
    point_grads_at(full_grad_);
    return;
  }

  // This rank's slice [r*S, (r+1)*S) of the flat vector: the part of each parameter that falls
  // inside it; the padding past the end stays zero.
  shard_ = Tensor(allocator, {S}, dtype, MemoryCategory::parameters, layout_.name + ".shard");
  shard_grad_ = Tensor(allocator, {S}, dtype, MemoryCategory::gradients, layout_.name + ".shard.grad");
  zero_device_memory(device, shard_.data(), shard_.nbytes());
  zero_device_memory(device, shard_grad_.data(), shard_grad_.nbytes());
  const std::size_t begin = static_cast<std::size_t>(comm_.rank()) * layout_.shard_numel;
  const std::size_t end = begin + layout_.shard_numel;
  for (const Slot& s : slots_) {
    const std::size_t from = std::max(begin, s.offset), to = std::min(end, s.offset + s.numel);
    if (from < to)
      copy_device_to_device(device, at(shard_, from - begin, dtype),
                            static_cast<const char*>(params[s.index].value.data()) + (from - s.offset) * b, (to - from) * b);
  }
  for (const Slot& s : slots_) {
    params[s.index].value.reset();
    params[s.index].grad.reset();
  }
}

void FlatUnit::point_values_at(Tensor& flat) {
  std::vector<Parameter>& params = model_.parameters();
  for (const Slot& s : slots_)
    params[s.index].value = Tensor::view(at(flat, s.offset, model_.dtype()), s.shape, model_.dtype(),
                                         MemoryCategory::parameters, params[s.index].name);
}

void FlatUnit::point_grads_at(Tensor& flat) {
  std::vector<Parameter>& params = model_.parameters();
  for (const Slot& s : slots_)
    params[s.index].grad = Tensor::view(at(flat, s.offset, model_.dtype()), s.shape, model_.dtype(),
                                        MemoryCategory::gradients, params[s.index].name + ".grad");
}

void FlatUnit::start_gather() {
  if (mode_ == ShardingMode::none || gathered()) return;
  gathered_ = Tensor(model_.device().allocator(), {static_cast<std::int64_t>(layout_.padded_numel)}, model_.dtype(),
                     MemoryCategory::parameters, layout_.name + ".gathered");
  pending_ = comm_.start_all_gather(shard_.data(), gathered_.data(), layout_.shard_numel, model_.dtype(),
                                    MemoryCategory::parameters);
}

// Started now (not prefetched) or earlier (prefetched): either way wait for it here, just before
// the model reads the unit's parameters, and only then let the model see them.
void FlatUnit::gather() {
  if (mode_ == ShardingMode::none) return;
  start_gather();
  if (!pending_) return;  // gathered and waited for already
  pending_->wait();
  pending_.reset();
  point_values_at(gathered_);
}

void FlatUnit::release() {
  if (mode_ == ShardingMode::none || !gathered()) return;
  pending_.reset();  // waits: a gather in flight still writes into the buffer
  for (const Slot& s : slots_) model_.parameters()[s.index].value.reset();
  gathered_.reset();
}

void FlatUnit::begin_gradients(bool accumulate) {
  if (mode_ == ShardingMode::none) return;  // the flat gradient is permanent; the model accumulates into it
  Device& device = model_.device();
  const DType dtype = model_.dtype();
  full_grad_ = Tensor(device.allocator(), {static_cast<std::int64_t>(layout_.padded_numel)}, dtype,
                      MemoryCategory::gradients, layout_.name + ".gathered.grad");
  zero_device_memory(device, full_grad_.data(), full_grad_.nbytes());
  // Later micro-batches: slice r starts from this rank's accumulated sum (see the header).
  if (accumulate)
    copy_device_to_device(device, at(full_grad_, static_cast<std::size_t>(comm_.rank()) * layout_.shard_numel, dtype),
                          shard_grad_.data(), shard_grad_.nbytes());
  point_grads_at(full_grad_);
}

void FlatUnit::reduce_gradients() {
  if (mode_ == ShardingMode::none) return;
  if (full_grad_.data() == nullptr) throw std::logic_error("FSDP unit " + layout_.name + ": no gradient to reduce");
  comm_.reduce_scatter(full_grad_.data(), shard_grad_.data(), layout_.shard_numel, model_.dtype(),
                       MemoryCategory::gradients);
  for (const Slot& s : slots_) model_.parameters()[s.index].grad.reset();
  full_grad_.reset();
}

void FlatUnit::all_reduce_gradients() {
  comm_.all_reduce(full_grad_.data(), layout_.numel, model_.dtype(), MemoryCategory::gradients);
}

}  // namespace trainmem::fsdp
