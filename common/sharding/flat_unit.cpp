#include "common/sharding/flat_unit.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "common/device/device_ops.h"

namespace trainmem {

namespace {
std::byte* at(void* flat, std::size_t element, DType dtype) {
  return static_cast<std::byte*>(flat) + element * dtype_size(dtype);
}
}  // namespace

FlatUnit::FlatUnit(Model& model, Communicator& comm, UnitLayout layout, Keep parameters, Keep gradients,
                   bool gradients_on_demand)
    : model_(model), comm_(comm), layout_(std::move(layout)), parameters_(parameters), gradients_(gradients),
      gradients_on_demand_(gradients_on_demand), dtype_(model.dtype()),
      first_owned_(layout_.shard_numel == layout_.padded_numel ? 0 : static_cast<std::size_t>(comm.rank()) * layout_.shard_numel) {
  if (gradients_ == Keep::host_shard) throw std::invalid_argument("FlatUnit: gradients are never kept on the host");
  std::vector<Parameter>& params = model_.parameters();
  for (std::size_t i : layout_.parameters) shapes_.push_back(params.at(i).shape);
  Device& device = model_.device();
  CachingAllocator& allocator = device.allocator();
  const std::size_t e = dtype_size(dtype_);
  const auto P = static_cast<std::int64_t>(layout_.padded_numel), S = static_cast<std::int64_t>(layout_.shard_numel);

  // Every parameter's elements that fall in [begin, end) of the flat vector, copied to `dst` (on
  // the device, or on the host when dst_on_host) at their offset from `begin`. The model's values
  // are on the device, or on the host when it was built for a sharded run (Parameter::host_value).
  auto copy_pieces = [&](std::size_t begin, std::size_t end, void* dst, bool dst_on_host) {
    for (std::size_t k = 0; k < layout_.parameters.size(); ++k) {
      const Parameter& p = params[layout_.parameters[k]];
      const std::size_t first = layout_.offsets[k], last = first + p.numel();
      const std::size_t from = std::max(begin, first), to = std::min(end, last);
      if (from >= to || !device.computes()) continue;  // meta: no values anywhere
      void* out = at(dst, from - begin, dtype_);
      const std::size_t bytes = (to - from) * e;
      const bool src_on_host = p.value.data() == nullptr;
      const std::byte* in = (src_on_host ? p.host_value.data() : static_cast<const std::byte*>(p.value.data())) +
                            (from - first) * e;
      if (src_on_host && dst_on_host) std::memcpy(out, in, bytes);
      else if (src_on_host) copy_host_to_device(device, out, in, bytes);
      else if (dst_on_host) copy_device_to_host(device, out, in, bytes);
      else copy_device_to_device(device, out, in, bytes);
    }
  };
  if (parameters_ == Keep::whole) {
    full_values_ = Tensor(allocator, {P}, dtype_, MemoryCategory::parameters, layout_.name + ".params");
    zero_device_memory(device, full_values_.data(), full_values_.nbytes());  // the padding
    copy_pieces(0, layout_.padded_numel, full_values_.data(), false);
  } else if (parameters_ == Keep::shard) {
    value_shard_ = Tensor(allocator, {S}, dtype_, MemoryCategory::parameters, layout_.name + ".params_shard");
    zero_device_memory(device, value_shard_.data(), value_shard_.nbytes());
    copy_pieces(first_owned_, first_owned_ + layout_.shard_numel, value_shard_.data(), false);
  } else {
    host_shard_bytes_ = layout_.shard_numel * e;
    // On the meta device the host shard is counted (host_bytes), never allocated: it grows with the model.
    if (device.computes()) {
      host_value_shard_.assign(host_shard_bytes_, std::byte{0});
      copy_pieces(first_owned_, first_owned_ + layout_.shard_numel, host_value_shard_.data(), true);
    }
  }
  for (std::size_t i : layout_.parameters) std::vector<std::byte>().swap(params[i].host_value);  // taken
  forget_values();
  forget_grads();
  if (parameters_ == Keep::whole) point_values_at(full_values_);

  if (gradients_on_demand_) return;  // made in the first backward (open_gradients, reduce_scatter_gradients)
  if (gradients_ == Keep::whole) {
    make_whole_gradients();
  } else {
    make_gradient_shard();
    zero_device_memory(device, grad_shard_.data(), grad_shard_.nbytes());
  }
}

// This rank's S elements of the unit's gradients (uninitialized).
void FlatUnit::make_gradient_shard() {
  grad_shard_ = Tensor(model_.device().allocator(), {static_cast<std::int64_t>(layout_.shard_numel)}, dtype_,
                       MemoryCategory::gradients, layout_.name + ".grads_shard");
}

// The unit's flat gradients, zeroed (the backward accumulates into them), shown to the model.
void FlatUnit::make_whole_gradients() {
  Device& device = model_.device();
  full_grads_ = Tensor(device.allocator(), {static_cast<std::int64_t>(layout_.padded_numel)}, dtype_,
                       MemoryCategory::gradients, layout_.name + ".grads");
  zero_device_memory(device, full_grads_.data(), full_grads_.nbytes());
  point_grads_at(full_grads_);
}

std::byte* FlatUnit::my_slice(Tensor& flat) const {
  return at(flat.data(), first_owned_, dtype_);
}

void FlatUnit::point_values_at(Tensor& flat) {
  std::vector<Parameter>& params = model_.parameters();
  for (std::size_t k = 0; k < layout_.parameters.size(); ++k) {
    Parameter& p = params[layout_.parameters[k]];
    p.value = Tensor::view(at(flat.data(), layout_.offsets[k], dtype_), shapes_[k], dtype_, MemoryCategory::parameters,
                           p.name);
  }
}

void FlatUnit::point_grads_at(Tensor& flat) {
  std::vector<Parameter>& params = model_.parameters();
  for (std::size_t k = 0; k < layout_.parameters.size(); ++k) {
    Parameter& p = params[layout_.parameters[k]];
    p.grad = Tensor::view(at(flat.data(), layout_.offsets[k], dtype_), shapes_[k], dtype_, MemoryCategory::gradients,
                          p.name + ".grad");
  }
}

void FlatUnit::forget_values() {
  for (std::size_t i : layout_.parameters) model_.parameters()[i].value.reset();
}

void FlatUnit::forget_grads() {
  for (std::size_t i : layout_.parameters) model_.parameters()[i].grad.reset();
}

// ---------------------------------------------------------------------------------------------
// parameters kept as a shard
// ---------------------------------------------------------------------------------------------

void FlatUnit::start_gather() {
  if (parameters_ == Keep::whole || gathered()) return;
  Device& device = model_.device();
  full_values_ = Tensor(device.allocator(), {static_cast<std::int64_t>(layout_.padded_numel)}, dtype_,
                        MemoryCategory::parameters, layout_.name + ".params");
  const void* send = value_shard_.data();
  if (parameters_ == Keep::host_shard) {  // offload: into this rank's slice, then gathered in place
    // (host_shard_bytes_, not the host vector's size: on meta the vector is never made, and the
    // copy must still be declared, with its bytes, for the planner's time)
    copy_host_to_device(device, my_slice(full_values_), host_value_shard_.data(), host_shard_bytes_);
    send = my_slice(full_values_);
  }
  pending_ = comm_.start_all_gather(send, full_values_.data(), layout_.shard_numel, dtype_, MemoryCategory::parameters);
}

// Started now or earlier (prefetched): either way waited for here, just before the model reads
// the unit's parameters, and only then shown to the model.
void FlatUnit::gather() {
  if (parameters_ == Keep::whole) return;
  start_gather();
  if (!pending_) return;  // gathered and waited for already
  pending_->wait();
  pending_.reset();
  point_values_at(full_values_);
}

void FlatUnit::release() {
  if (parameters_ == Keep::whole || !gathered()) return;
  pending_.reset();  // waits: a gather in flight still writes into the buffer
  forget_values();
  full_values_.reset();
}

// ---------------------------------------------------------------------------------------------
// gradients kept as a shard
// ---------------------------------------------------------------------------------------------

void FlatUnit::open_gradients(bool accumulate) {
  if (gradients_ == Keep::whole) {
    // Persistent: the flat gradient exists for good and the model accumulates into it. On demand:
    // made by the step's first backward of the unit, kept through the step's micro-batches.
    if (full_grads_.data() == nullptr) make_whole_gradients();
    return;
  }
  if (accumulate && grad_shard_.data() == nullptr)
    throw std::logic_error("unit " + layout_.name + ": no gradient shard to accumulate into");
  make_whole_gradients();  // the bucket
  if (accumulate)
    copy_device_to_device(model_.device(), my_slice(full_grads_), grad_shard_.data(), grad_shard_.nbytes());
}

void FlatUnit::reduce_scatter_gradients() {
  if (gradients_ == Keep::whole || full_grads_.data() == nullptr)
    throw std::logic_error("unit " + layout_.name + ": no gradient bucket to reduce-scatter");
  if (grad_shard_.data() == nullptr) make_gradient_shard();  // on demand: the step's first reduce-scatter writes all of it
  comm_.reduce_scatter(full_grads_.data(), grad_shard_.data(), layout_.shard_numel, dtype_, MemoryCategory::gradients);
  forget_grads();
  full_grads_.reset();
}

// ---------------------------------------------------------------------------------------------
// whole parameters / gradients
// ---------------------------------------------------------------------------------------------

void FlatUnit::reduce_scatter_gradients_in_place() {
  comm_.reduce_scatter(full_grads_.data(), my_slice(full_grads_), layout_.shard_numel, dtype_, MemoryCategory::gradients);
}

void FlatUnit::all_gather_parameters_in_place() {
  comm_.all_gather(my_slice(full_values_), full_values_.data(), layout_.shard_numel, dtype_, MemoryCategory::parameters);
}

void FlatUnit::all_reduce_gradients() {
  comm_.all_reduce(full_grads_.data(), layout_.padded_numel, dtype_, MemoryCategory::gradients);
}

void FlatUnit::zero_gradients() { zero_device_memory(model_.device(), full_grads_.data(), full_grads_.nbytes()); }

void FlatUnit::release_gradients() {
  if (!gradients_on_demand_) throw std::logic_error("unit " + layout_.name + ": persistent gradients are never released");
  forget_grads();
  full_grads_.reset();
  grad_shard_.reset();
}

// ---------------------------------------------------------------------------------------------

void* FlatUnit::owned_parameters() {
  switch (parameters_) {
    case Keep::whole: return my_slice(full_values_);
    case Keep::shard: return value_shard_.data();
    case Keep::host_shard: return host_value_shard_.data();
  }
  return nullptr;
}

void* FlatUnit::owned_gradients() {
  if (gradients_ == Keep::whole) return full_grads_.data() == nullptr ? nullptr : my_slice(full_grads_);
  return grad_shard_.data();
}

}  // namespace trainmem
