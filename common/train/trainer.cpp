#include "common/train/trainer.h"

#include <cmath>
#include <cstdio>
#include <stdexcept>

#include "common/device/cost_log.h"

namespace trainmem {

Trainer::Trainer(Model& model, BatchSource& data, TrainerOptions options, std::vector<Strategy*> strategies,
                 Optimizer* optimizer)
    : model_(model), data_(data), options_(options), strategies_(std::move(strategies)), optimizer_(optimizer) {
  if (optimizer_ == nullptr) {
    own_optimizer_ = std::make_unique<AdamWOptimizer>(model, options.adam, options.max_grad_norm);
    optimizer_ = own_optimizer_.get();
  }
  if (options_.batch < 1 || options_.seq < 1 || options_.accumulation_steps < 1)
    throw std::invalid_argument("the micro-batch, the sequence length and the micro-batches per step must be at least 1");
  if (strategies_.empty()) strategies_.push_back(&baseline_);
  const auto B = static_cast<std::int64_t>(options_.batch), T = static_cast<std::int64_t>(options_.seq);
  CachingAllocator& a = model_.device().allocator();
  tokens_ = Tensor(a, {B, T}, DType::i32, MemoryCategory::data, "batch.tokens");
  targets_ = Tensor(a, {B, T}, DType::i32, MemoryCategory::data, "batch.targets");
}

AdamWOptimizer& Trainer::optimizer() {
  if (!own_optimizer_) throw std::logic_error("Trainer::optimizer(): this trainer runs an optimizer given by its caller");
  return *own_optimizer_;
}

template <typename Hook>
void Trainer::each(Hook&& hook) {
  for (Strategy* s : strategies_) hook(*s);
}

double Trainer::loss_scale() {
  double scale = 1.0;
  each([&](Strategy& s) { scale *= s.loss_scale(); });
  return scale;
}

double Trainer::micro_step(std::size_t micro, double loss_scale) {
  StepContext ctx{model_, *this, step_ + 1, micro};
  MemoryRecorder& recorder = model_.device().allocator().recorder();
  const std::size_t L = model_.config().layers;

  if (CostLog* log = model_.device().cost_log()) log->begin_micro_batch(step_ + 1, micro);
  each([&](Strategy& s) { s.on_data_fetch(ctx); });
  data_.next(tokens_, targets_);

  recorder.set_phase("forward");
  model_.begin(tokens_, targets_);
  model_.embed_forward();
  for (std::size_t l = 0; l < L; ++l) {
    each([&](Strategy& s) { s.before_layer_forward(ctx, l); });
    model_.layer_forward(l);
    each([&](Strategy& s) { s.after_layer_forward(ctx, l); });
  }
  // mean over B*T positions and over the micro-batches of this step, times the loss scale: known
  // before the forward, so the cross-entropy makes the logits' gradient with the loss (one pass)
  const double dloss = loss_scale / static_cast<double>(options_.batch * options_.seq * options_.accumulation_steps);
  const double loss = model_.head_forward(static_cast<float>(dloss));

  recorder.set_phase("backward");
  model_.head_backward();
  for (std::size_t l = L; l-- > 0;) {
    each([&](Strategy& s) { s.before_layer_backward(ctx, l); });
    model_.layer_backward(l);
    each([&](Strategy& s) { s.after_layer_backward(ctx, l); });
  }
  model_.embed_backward();
  model_.end();
  each([&](Strategy& s) { s.after_backward(ctx); });
  return loss;
}

StepResult Trainer::step() {
  const auto start = std::chrono::steady_clock::now();
  CachingAllocator& allocator = model_.device().allocator();
  allocator.recorder().set_step(step_ + 1);

  const double scale = loss_scale();  // fixed for the whole step: every micro-batch the same
  double loss = 0;
  for (std::size_t micro = 0; micro < options_.accumulation_steps; ++micro) loss += micro_step(micro, scale);
  loss /= static_cast<double>(options_.accumulation_steps);

  StepContext ctx{model_, *this, step_ + 1, options_.accumulation_steps - 1};
  allocator.recorder().set_phase("optimizer");
  if (CostLog* log = model_.device().cost_log()) log->begin_optimizer(step_ + 1);
  each([&](Strategy& s) { s.before_optimizer_step(ctx); });
  const Optimizer::StepOutcome outcome = optimizer_->step(scale);
  // A NaN or inf in the weights would make every later step's gradients non-finite, so every
  // later step would be skipped: the run stops here instead, saying what to change.
  if (!outcome.weights_finite) {
    char scale_text[32];
    std::snprintf(scale_text, sizeof scale_text, "%g", scale);
    throw DivergedError("step " + std::to_string(step_ + 1) + " (loss scale " + scale_text + ") wrote inf or NaN into the weights: training cannot go on from them. Use a smaller --lr or "
                        "--grad-clip; with --precision fp16 keep the loss scale and its factors near their defaults "
                        "(or use --precision bf16, which needs no loss scale)");
  }
  ctx.step_skipped = outcome.skipped;
  model_.zero_grad();
  each([&](Strategy& s) { s.after_optimizer_step(ctx); });
  model_.device().synchronize();
  ++step_;

  StepResult r;
  r.step = step_;
  r.loss = loss;
  r.grad_norm = outcome.grad_norm;
  r.loss_scale = scale;
  r.skipped = outcome.skipped;
  r.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  r.tokens_per_s = static_cast<double>(options_.batch * options_.seq * options_.accumulation_steps) / (r.ms / 1000.0);
  if (CostLog* log = model_.device().cost_log()) log->end_step(step_, r.ms / 1000.0);
  const MemoryStats s = allocator.stats();
  r.allocated_bytes = s.allocated_bytes[0].current;
  r.reserved_bytes = s.reserved_bytes[0].current;
  r.peak_allocated_bytes = s.allocated_bytes[0].peak;
  r.peak_reserved_bytes = s.reserved_bytes[0].peak;
  stop_if_every_step_is_skipped(r);
  return r;
}

// One overflowing batch skips one step, and fp16's loss scaler backs off after each skip until the
// gradients fit. But steps skipped in a row at a scale that no longer falls (none: fp32 and bf16;
// fp16's at its floor) fail on the weights, not on a batch: every later step would be skipped
// too, and the run would go on changing nothing. It stops after kMaxSkippedStepsAtOneScale of
// them, naming the cause.
void Trainer::stop_if_every_step_is_skipped(const StepResult& r) {
  if (!r.skipped) {
    skipped_in_a_row_ = 0;
    return;
  }
  const bool backed_off = skipped_in_a_row_ > 0 && r.loss_scale < scale_of_last_skip_;
  skipped_in_a_row_ = backed_off ? 1 : skipped_in_a_row_ + 1;
  scale_of_last_skip_ = r.loss_scale;
  if (skipped_in_a_row_ < kMaxSkippedStepsAtOneScale) return;
  char text[160];
  std::snprintf(text, sizeof text, "loss %g, gradient norm %g, loss scale %g; --lr %g, --weight-decay %g", r.loss,
                r.grad_norm, r.loss_scale, static_cast<double>(options_.adam.lr),
                static_cast<double>(options_.adam.weight_decay));
  const long first = step_ - skipped_in_a_row_ + 1;
  throw DivergedError("steps " + std::to_string(first) + " to " + std::to_string(step_) +
                      " were all skipped, their gradients inf or NaN (" + text + "): " +
                      (std::isfinite(r.loss) ? "the backward pass overflows" : "the forward pass overflows with these weights") +
                      ", and no later step would train. Use a smaller --lr or --weight-decay, or --grad-clip; with "
                      "--precision fp16 a smaller initial loss scale (or --precision bf16)");
}

}  // namespace trainmem
