// One FSDP unit's flat parameter: the unit's parameter tensors concatenated into one vector, of
// which this rank keeps one shard, and which is gathered whole only while the unit computes.
//
//   at rest         shard      S elements: this rank's slice [r*S, (r+1)*S) of the padded flat
//                   shard_grad S elements: the summed gradient of that slice (what the optimizer reads)
//   gather()        gathered = all_gather(shard) (N*S elements); each model Parameter's value
//                   becomes a view at its offset inside it, so the model computes unchanged
//   start_gather()  the same all-gather, started (Communicator::start_all_gather) but not waited
//                   for: the buffer exists, the model cannot see it yet; gather() waits for it
//   release()       gathered freed; the model's Parameters become empty again
//   begin_gradients()   a full-size gradient buffer, zeroed, that the unit's backward accumulates
//                       into (each Parameter's grad is a view inside it)
//   reduce_gradients()  shard_grad = reduce_scatter(full gradient): slice r summed over the ranks;
//                       the full buffer is freed
//
// Gradient accumulation over micro-batches without an extra buffer: before a later micro-batch's
// backward, rank r writes its accumulated shard_grad into slice r of the zeroed full buffer; the
// reduce-scatter then sums, for slice r, every rank's new gradient plus that accumulated value,
// which only rank r contributed:  shard_grad <- shard_grad + sum over ranks of this micro-batch's.
//
// NO_SHARD (plain data parallel): the flat parameter and gradient are whole on every rank for the
// whole run (S = numel, no padding); all_reduce_gradients() sums the gradient over the ranks.
#pragma once
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "common/comm/communicator.h"
#include "common/model/gpt.h"
#include "suites/fsdp/fsdp_units.h"

namespace trainmem::fsdp {

class FlatUnit {
 public:
  // Takes the unit's parameters (indices into model.parameters(), in order) from the model: their
  // current values (the same on every rank: same seed) become this rank's shard, and the model's
  // own storage for them (values and gradients) is freed.
  FlatUnit(GPT& model, Communicator& comm, UnitLayout layout, std::vector<std::size_t> parameter_indices,
           ShardingMode mode);

  const UnitLayout& layout() const { return layout_; }
  const std::string& name() const { return layout_.name; }

  // Gathered or being gathered: the gathered buffer exists (it counts in memory from the start).
  bool gathered() const { return gathered_.data() != nullptr; }
  void start_gather();
  void gather();
  void release();
  void begin_gradients(bool accumulate);
  void reduce_gradients();
  void all_reduce_gradients();  // NO_SHARD

  // What the optimizer updates: the shard and its gradient (NO_SHARD: the whole flat vectors).
  Tensor& shard() { return mode_ == ShardingMode::none ? gathered_ : shard_; }
  Tensor& shard_grad() { return mode_ == ShardingMode::none ? full_grad_ : shard_grad_; }

 private:
  struct Slot {  // one model parameter inside the flat vector
    std::size_t index;                // in model.parameters()
    std::vector<std::int64_t> shape;
    std::size_t offset;               // elements from the start of the flat vector
    std::size_t numel;
  };
  void point_values_at(Tensor& flat);
  void point_grads_at(Tensor& flat);

  GPT& model_;
  Communicator& comm_;
  UnitLayout layout_;
  ShardingMode mode_;
  std::vector<Slot> slots_;
  Tensor shard_, shard_grad_;   // sharded modes
  Tensor gathered_, full_grad_;  // while gathered / during the unit's backward (NO_SHARD: always)
  // The gather in flight after start_gather(), until gather() waits for it. Declared after
  // gathered_, so it is destroyed (waited for) before the buffer it writes is freed.
  std::unique_ptr<PendingCollective> pending_;
};

}  // namespace trainmem::fsdp
