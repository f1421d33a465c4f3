// A training technique is a Strategy: code the trainer calls at fixed points of every step.
// The trainer never changes for a new technique; techniques compose by listing several
// strategies (they are called in order at each hook).
//
//   on_data_fetch                       before a micro-batch is loaded
//   before/after_layer_forward(l)       around each layer's forward
//   before/after_layer_backward(l)      around each layer's backward
//   after_backward                      after a micro-batch's backward (every gradient of this
//                                       micro-batch complete: embeddings and head included)
//   before/after_optimizer_step         around the update
//   loss_scale()                        a factor on the loss before backward (loss scaling);
//                                       the optimizer divides it out again
#pragma once
#include <cstddef>
#include <string>

namespace trainmem {

class Model;
class Trainer;

struct StepContext {
  Model& model;
  Trainer& trainer;
  long step;               // 1, 2, ... (the optimizer step being built)
  std::size_t micro_step;  // 0 .. accumulation steps - 1
  bool step_skipped = false;  // set for after_optimizer_step: inf/NaN gradients, no update made
};

class Strategy {
 public:
  virtual ~Strategy() = default;
  virtual std::string name() const = 0;
  virtual void on_data_fetch(StepContext&) {}
  virtual void before_layer_forward(StepContext&, std::size_t /*layer*/) {}
  virtual void after_layer_forward(StepContext&, std::size_t /*layer*/) {}
  virtual void before_layer_backward(StepContext&, std::size_t /*layer*/) {}
  virtual void after_layer_backward(StepContext&, std::size_t /*layer*/) {}
  virtual void after_backward(StepContext&) {}
  virtual void before_optimizer_step(StepContext&) {}
  virtual void after_optimizer_step(StepContext&) {}
  virtual double loss_scale() const { return 1.0; }
};

// The baseline: no technique. Everything forward saves stays until backward frees it.
class BaselineStrategy : public Strategy {
 public:
  std::string name() const override { return "baseline"; }
};

}  // namespace trainmem
