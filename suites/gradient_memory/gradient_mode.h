// What `--grads` chooses: how long a parameter's gradient exists.
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

namespace trainmem::gradient_memory {

enum class GradientMode { persistent, on_demand };

inline GradientMode parse_gradient_mode(const std::string& text) {
  if (text == "persistent") return GradientMode::persistent;
  if (text == "on-demand") return GradientMode::on_demand;
  throw std::invalid_argument("--grads must be persistent or on-demand, not '" + text + "'");
}

inline std::string to_string(GradientMode mode) { return mode == GradientMode::persistent ? "persistent" : "on-demand"; }

// --optimizer-in-backward (optimizer_in_backward.h): each parameter updated as soon as its
// gradient is complete, the gradient freed at once.
struct OptimizerInBackwardChoice {
  bool on = false;
};

}  // namespace trainmem::gradient_memory
