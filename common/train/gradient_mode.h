// How long a parameter's gradient exists: what `--grads` and `--optimizer-in-backward` choose.
// The flags and their rules are suites/gradient_memory's registration; the values live here
// because every holder of gradients honours them: the model's own tensors
// (suites/gradient_memory/on_demand_gradients.h, optimizer_in_backward.h) and the sharding
// engine's flat buffers (common/sharding, ShardingPlan).
//
//   --grads persistent   every gradient is allocated with the model and zeroed after each
//                        optimizer step (PyTorch's zero_grad(set_to_none=False))
//   --grads on-demand    no gradient exists between steps: each is made at its first write in the
//                        backward (zeroed, then accumulated into, across the micro-batches of a
//                        step) and freed after the optimizer step (PyTorch's default since 2.0,
//                        zero_grad(set_to_none=True))
#pragma once
#include <string>

#include "common/cli/enum_table.h"

namespace trainmem {

enum class GradientMode { persistent, on_demand };

inline constexpr auto kGradientModes =
    cli::enum_table<GradientMode>("gradient mode", {{GradientMode::persistent, "persistent"}, {GradientMode::on_demand, "on-demand"}});

inline std::string to_string(GradientMode mode) { return std::string(kGradientModes.name(mode)); }

// --optimizer-in-backward: each parameter (under sharding: each unit's shard) updated as soon as
// its gradient is complete (and reduced), and that gradient freed at once.
struct OptimizerInBackwardChoice {
  bool on = false;
};

// The two flags together, as the memory formulas need them: until when a gradient is held.
enum class GradientLifetime {
  persistent,    // for good (zeroed after each step)
  until_step,    // from its first write to the optimizer step (--grads on-demand)
  until_update,  // from its first write to its own update in the backward (--optimizer-in-backward)
};

inline GradientLifetime gradient_lifetime(GradientMode mode, OptimizerInBackwardChoice in_backward) {
  if (in_backward.on) return GradientLifetime::until_update;
  return mode == GradientMode::on_demand ? GradientLifetime::until_step : GradientLifetime::persistent;
}

// The same, read from a run's technique options (a TrainingSetup).
template <typename Setup>
GradientLifetime gradient_lifetime(const Setup& setup) {
  return gradient_lifetime(setup.template option<GradientMode>(), setup.template option<OptimizerInBackwardChoice>());
}

}  // namespace trainmem
