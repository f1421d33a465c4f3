// The training step, with hook points for strategies (see strategy.h):
//
//   for each micro-batch:  fetch data -> embed -> [layer forward] x L -> head (loss)
//                          -> head backward -> [layer backward] x L (reverse) -> embed backward
//   optimizer step (clip, AdamW) -> zero gradients
//
// The allocator's recorder is told the step and phase ("forward", "backward", "optimizer"), so
// a memory timeline can be cut by phase.
#pragma once
#include <chrono>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <vector>

#include "common/data/batch_source.h"
#include "common/model/model.h"
#include "common/train/adamw_optimizer.h"
#include "common/train/strategy.h"

namespace trainmem {

struct TrainerOptions {
  std::size_t batch = 4;             // B, the micro-batch
  std::size_t seq = 64;              // T
  std::size_t accumulation_steps = 1;  // micro-batches per optimizer step
  kernels::AdamWHyper adam;
  float max_grad_norm = 1.0f;        // 0 disables clipping
};

struct StepResult {
  long step = 0;
  double loss = 0;           // mean over the step's micro-batches
  double grad_norm = 0;      // of the unscaled gradients, before clipping
  double loss_scale = 1;     // the factor the loss was multiplied by in backward
  bool skipped = false;      // inf/NaN gradients: the optimizer made no update
  double ms = 0;
  double tokens_per_s = 0;
  std::int64_t allocated_bytes = 0, reserved_bytes = 0;  // at the end of the step
  std::int64_t peak_allocated_bytes = 0, peak_reserved_bytes = 0;  // since the start of training
};

// An update left inf or NaN in the weights: the run cannot go on (exit 1, saying what to change).
// Also: kMaxSkippedStepsAtOneScale steps skipped in a row at a loss scale that did not fall
// (Trainer::step): no later step would train.
struct DivergedError : std::runtime_error {
  using std::runtime_error::runtime_error;
};
constexpr long kMaxSkippedStepsAtOneScale = 10;

class Trainer {
 public:
  // `optimizer`: nullptr for the trainer's own AdamWOptimizer over the whole model (made here,
  // from options.adam and options.max_grad_norm); else one the caller owns, e.g. a sharded one.
  Trainer(Model& model, BatchSource& data, TrainerOptions options, std::vector<Strategy*> strategies = {},
          Optimizer* optimizer = nullptr);

  StepResult step();
  Model& model() { return model_; }
  // The trainer's own AdamW (throws std::logic_error when the caller gave another optimizer).
  AdamWOptimizer& optimizer();
  const TrainerOptions& options() const { return options_; }
  long steps_taken() const { return step_; }

 private:
  double micro_step(std::size_t micro, double loss_scale);
  double loss_scale();  // the product of the strategies' factors
  void stop_if_every_step_is_skipped(const StepResult& r);  // DivergedError (trainer.cpp)
  template <typename Hook>
  void each(Hook&& hook);

  Model& model_;
  BatchSource& data_;
  TrainerOptions options_;
  std::vector<Strategy*> strategies_;
  BaselineStrategy baseline_;
  std::unique_ptr<AdamWOptimizer> own_optimizer_;  // only without an external optimizer
  Optimizer* optimizer_;
  Tensor tokens_, targets_;  // the device's copy of the current micro-batch (category data)
  long step_ = 0;
  long skipped_in_a_row_ = 0;       // steps skipped in a row, since the loss scale last fell
  double scale_of_last_skip_ = 0;
};

}  // namespace trainmem
