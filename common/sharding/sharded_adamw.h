// AdamW over this rank's shards of flat parameters: the sharding engine's optimizer (ZeRO-1/2/3,
// FSDP; sharding_engine.h).
//
// The engine flattens each unit's parameters into one vector (unit_layout.h), pads it to a
// multiple of the world size N and gives rank r the contiguous slice
//   [r*S, (r+1)*S),  S = ceil(numel / N)
// This optimizer keeps, for each registered shard, the fp32 state of exactly that slice:
//   master weights (4 B/element, only when the model is 16-bit: the fp32 model's own shard is
//   updated in place), Adam's m and v (8 B/element)     -> 12*S or 8*S bytes, category optimizer_state
// and runs the same AdamW update (kernels/adamw.h) as AdamWOptimizer, so that N ranks after k
// steps hold the parameters one rank holds — the sharding suites' equality tests.
//
// Gradients: each registered `grad` holds the SUM over the N ranks of their gradients (what a
// reduce-scatter leaves), each rank's gradient being the mean over its own B rows (the trainer's
// loss). The mean over all N*B rows — what one rank with the whole batch computes — is that sum
// divided by N, so the optimizer divides by N together with the loss scale:
//   g = grad / (loss_scale * N), then clipped
//
// Global decisions need every rank's shards:
//   grad norm   = sqrt(all_reduce_sum(sum of squares of this rank's gradient shards)) / (loss_scale * N)
//   skip        = the norm is inf/NaN on any rank (the sum carries it to every rank)
// so every rank clips by the same factor and skips the same steps. With N = 1 and one shard per
// parameter tensor this is AdamWOptimizer's arithmetic, operation for operation (same bits).
//
// With Offload::optimizer the state lives in host memory (plain heap, not the device's
// allocator: it is reported as host bytes) and the update runs on the CPU: gradient shard to
// host, Adam there, updated parameter shard back (ZeRO-Offload). Host bytes per shard element:
// fp32 master 4 + m 4 + v 4 + an fp32 copy of the gradient 4 = 16 (the master is kept even for
// an fp32 model: the device weights are then its copy).
// With Offload::params (ZeRO-3's parameter offload) the same, and `param` points to HOST memory
// (the caller keeps the parameter shard there): the update is rounded into it on the host.
// Either way the gradient is read on the device, widened to fp32 in a workspace tensor.
// On the meta device (Device::computes() false) the host state is counted, never allocated, and
// no update runs: an estimate with offload holds and computes nothing in proportion to the model.
#pragma once
#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "common/cli/enum_table.h"
#include "common/comm/communicator.h"
#include "common/tensor/tensor.h"
#include "common/train/optimizer.h"
#include "kernels/adamw.h"

namespace trainmem {

class Device;

enum class Offload { none, optimizer, params };
inline constexpr auto kOffloads =
    cli::enum_table<Offload>("offload", {{Offload::none, "none"}, {Offload::optimizer, "optimizer"}, {Offload::params, "params"}});
inline std::string to_string(Offload offload) { return std::string(kOffloads.name(offload)); }

class ShardedAdamW : public Optimizer {
 public:
  ShardedAdamW(Device& device, Communicator& comm, kernels::AdamWHyper hyper, float max_grad_norm,
               Offload offload = Offload::none);
  ~ShardedAdamW() override;  // defined where Shard is complete

  // One shard to update. `param` and `grad` point at this rank's `count` elements, in `dtype`
  // (the model's storage type), on the device; both stay owned by the caller and must stay valid
  // (same address) for the optimizer's life. The master weights are taken from `param` now.
  // Padding elements past the end of the flat vector are registered too (they are zeros and stay
  // zeros: their gradients are zero).
  void add_shard(void* param, void* grad, std::size_t count, DType dtype, const std::string& name);
  // The same, for a gradient that is made and freed between steps (gradients on demand): where it
  // is is asked at each step.
  using GradientAt = std::function<void*()>;
  void add_shard(void* param, GradientAt grad, std::size_t count, DType dtype, const std::string& name);

  StepOutcome step(double loss_scale) override;
  long steps_taken() const override { return step_; }

  // The optimizer in the backward (sharding_engine.h): the `index`-th shard's update of optimizer
  // step `step` alone, g = grad * grad_scale, with no decision over the whole gradient (no
  // clipping, no skip: the registration refuses what needs them). step() is then never called.
  void update_shard(std::size_t index, long step, float grad_scale);

  std::size_t device_state_bytes() const;    // optimizer_state bytes in the device allocator (512-rounded)
  std::size_t host_state_bytes() const;      // bytes in host memory (offload): 16 per element (meta: counted)

  // The fp32 master weights of the `index`-th registered shard (host copy): the master array, or
  // the fp32 model's own shard, which is its master.
  std::vector<float> master_values(std::size_t index);

 private:
  struct Shard;
  void update(Shard& s, long step, float grad_scale);
  void copy_to_host_widened(float* out, const Tensor& t);

  Device& device_;
  Communicator& comm_;
  kernels::AdamWHyper hyper_;
  float max_grad_norm_;
  Offload offload_;
  long step_ = 0;
  std::vector<Shard> shards_;
};

}  // namespace trainmem
