// What `--grads` chooses: how long a parameter's gradient exists. The flag and its rules are
// suites/gradient_memory's registration; the value lives here because every holder of gradients
// honours it: the model's own tensors (suites/gradient_memory/on_demand_gradients.h) and the
// sharding engine's flat buffers (common/sharding, ShardingPlan::gradients_on_demand).
//
//   --grads persistent   every gradient is allocated with the model and zeroed after each
//                        optimizer step (PyTorch's zero_grad(set_to_none=False))
//   --grads on-demand    no gradient exists between steps: each is made at its first write in the
//                        backward (zeroed, then accumulated into, across the micro-batches of a
//                        step) and freed after the optimizer step (PyTorch's default since 2.0,
//                        zero_grad(set_to_none=True))
#pragma once
#include <stdexcept>
#include <string>

namespace trainmem {

enum class GradientMode { persistent, on_demand };

inline GradientMode parse_gradient_mode(const std::string& text) {
  if (text == "persistent") return GradientMode::persistent;
  if (text == "on-demand") return GradientMode::on_demand;
  throw std::invalid_argument("--grads must be persistent or on-demand, not '" + text + "'");
}

inline std::string to_string(GradientMode mode) { return mode == GradientMode::persistent ? "persistent" : "on-demand"; }

}  // namespace trainmem
