// One unit's flat parameters and gradients on this rank, and the collectives that move them
// (unit_layout.h says what a unit is; sharding_engine.h the category of every buffer here).
//
// Each of the two is kept between uses either whole (every rank the whole padded flat vector, for
// good) or as this rank's shard (S elements; for parameters optionally in host memory):
//
//   parameters kept as a shard
//     start_gather()   the whole-unit buffer allocated and its all-gather started, not waited for
//                      (prefetch): the buffer counts in memory from here, the model cannot see it yet
//     gather()         waits for it (starting it first if nobody did); the model's Parameters
//                      become views at their offsets inside it, so the model computes unchanged
//     release()        the buffer freed; the model's Parameters become empty
//     A host-resident shard (parameter offload) is first copied into this rank's slice of the
//     buffer, which is then all-gathered in place.
//   gradients kept as a shard
//     open_gradients(accumulate)   a whole-unit gradient buffer (the bucket), zeroed, that the
//                                  unit's backward accumulates into through the model's grad views
//     reduce_scatter_gradients()   grad shard = slice r of the sum over ranks of the buckets; the
//                                  bucket is freed
//     Gradient accumulation without an extra buffer: on a later micro-batch (accumulate = true)
//     slice r of the bucket starts as this rank's accumulated shard, so the reduce-scatter adds it
//     in (only rank r contributes it):  shard <- shard + sum over ranks of this micro-batch's.
//   whole parameters / gradients: the model's views point into the flat vectors for good; gather,
//     release and open_gradients do nothing. With a sharded optimizer (ZeRO-1/2) each rank updates
//     its slice, so the unit is brought back together in place:
//       reduce_scatter_gradients_in_place()   slice r of the gradients summed over the ranks
//       all_gather_parameters_in_place()      every rank's updated slice, to every rank
//     Unsharded (NO_SHARD): all_reduce_gradients() sums the whole gradient over the ranks.
//   gradients on demand (--grads on-demand, PyTorch's set_to_none): no gradient storage exists
//     between optimizer steps. Whole gradients are allocated, zeroed, by the step's first
//     open_gradients; a shard by the step's first reduce-scatter, which writes all of it (the
//     bucket is still alive then: both count at that moment). release_gradients() frees both
//     after the optimizer step. Across micro-batches they stay, so accumulation is unchanged.
#pragma once
#include <cstddef>
#include <memory>
#include <vector>

#include "common/comm/communicator.h"
#include "common/model/model.h"
#include "common/sharding/unit_layout.h"

namespace trainmem {

// How a rank keeps a unit's parameters or gradients between the moments it uses them.
enum class Keep { whole, shard, host_shard };  // host_shard: parameters only (ZeRO-3 offload)

class FlatUnit {
 public:
  // Takes the unit's parameters from the model: their current values (the same on every rank:
  // same seed) fill the flat vector or this rank's shard of it, and the model's own storage for
  // them (values and gradients) is freed.
  FlatUnit(Model& model, Communicator& comm, UnitLayout layout, Keep parameters, Keep gradients,
           bool gradients_on_demand = false);

  const UnitLayout& layout() const { return layout_; }

  bool gathered() const { return full_values_.data() != nullptr; }  // or being gathered
  void start_gather();
  void gather();
  void release();

  void open_gradients(bool accumulate);
  void reduce_scatter_gradients();
  void reduce_scatter_gradients_in_place();
  void all_gather_parameters_in_place();
  void all_reduce_gradients();
  void zero_gradients();  // whole gradients: the flat vector, padding and other ranks' slices too
  void release_gradients();  // on demand, after the optimizer step: the unit's gradient storage freed

  // What this rank's optimizer updates: its S elements of the parameters (host memory for a
  // host_shard) and of their gradient. A unit cut into one slice (S = padded) is owned whole.
  // With gradients on demand the gradient's address changes from step to step (nullptr while none).
  void* owned_parameters();
  void* owned_gradients();
  std::size_t host_bytes() const { return host_shard_bytes_; }  // (on meta: counted, not allocated)

 private:
  std::byte* my_slice(Tensor& flat) const;  // flat + first_owned_ elements
  void make_whole_gradients();
  void make_gradient_shard();
  void point_values_at(Tensor& flat);
  void point_grads_at(Tensor& flat);
  void forget_values();
  void forget_grads();

  Model& model_;
  Communicator& comm_;
  UnitLayout layout_;
  Keep parameters_, gradients_;
  bool gradients_on_demand_;
  DType dtype_;
  std::size_t first_owned_;  // r * S: rank r owns [r*S, (r+1)*S); 0 for a unit cut into one slice
  std::vector<std::vector<std::int64_t>> shapes_;  // of the unit's parameters (the views need them)
  Tensor value_shard_, grad_shard_;               // kept as a shard, on the device
  std::vector<std::byte> host_value_shard_;       // kept as a shard, on the host
  std::size_t host_shard_bytes_ = 0;              // its size (also on meta, where it is not allocated)
  Tensor full_values_, full_grads_;               // whole: for good; sharded: while gathered / opened
  // The gather in flight after start_gather(), until gather() waits for it. Declared after
  // full_values_, so it is destroyed (waited for) before the buffer it writes is freed.
  std::unique_ptr<PendingCollective> pending_;
};

}  // namespace trainmem
