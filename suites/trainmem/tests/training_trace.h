// A few training steps of a model (either family) on one device, recorded step by step, for comparing devices and
// precisions: the same seed gives the same initial weights (drawn in fp32 on the host, then
// rounded to the storage type) and the same tokens (the synthetic corpus) on every device.
//
// The run is the one `trainmem train` builds (common/train/training_run.h over the registered
// techniques), so it has what --precision adds to it: fp16 gets mixed precision's dynamic loss
// scaler, bf16 and fp32 nothing; no other technique is asked for. Clipping is off, so that each
// step's update depends on that step's gradients alone (cuda_vs_cpu_tolerance.h counts on it).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/data/host_tokens.h"
#include "common/data/token_file.h"
#include "common/device/device.h"
#include "common/model/gpt.h"
#include "common/model/parameter_table.h"
#include "common/train/technique.h"
#include "common/train/training_run.h"
#include "common/train/training_setup.h"
#include "suites/trainmem/techniques.h"

namespace trainmem::testing_support {

struct TraceSetup {
  ModelConfig model;
  ModelOptions options;  // precision and attention
  std::size_t batch = 4;
  std::size_t steps = 4;
  std::uint64_t seed = 1;       // the initial weights
  std::uint64_t data_seed = 1;  // the synthetic corpus
  kernels::AdamWHyper adam;
};

struct TracedStep {
  double loss = 0;
  double grad_norm = 0;   // the trainer's: of the unscaled gradients
  double loss_scale = 1;
  bool skipped = false;
  // The gradients before the update, divided by the loss scale, widened to fp32, in parameters() order.
  std::vector<float> gradients;
  // A bound on |logit| from the weights the step started with (cuda_vs_cpu_tolerance.h):
  // (max|lnf.weight| sqrt(C) + ||lnf.bias||) max_v ||wte[v]||.
  double logit_bound = 0;
};

// The bound on every logit z = norm(x) . head[v]. GPT: lnf's output is gamma * xhat + beta with
// ||xhat|| <= sqrt(C) (unit variance over C channels), so ||lnf(x)|| <= max|gamma| sqrt(C) + ||beta||,
// and the head is wte. Llama: RMSNorm's output is gamma * xhat, ||xhat|| <= sqrt(C) (unit mean
// square), no beta, and the head is head.weight. Then |z| <= ||norm(x)|| ||head[v]|| (Cauchy-Schwarz).
inline double logit_bound(const ModelConfig& config, const std::vector<float>& values) {
  const ParameterTable table(config);
  const std::size_t C = config.dim;
  const bool llama = config.arch == Arch::llama;
  auto offset_of = [&](std::size_t index) {  // where parameter `index` starts in `values`
    std::size_t offset = 0;
    for (std::size_t i = 0; i < index; ++i) offset += table[i].numel();
    return offset;
  };
  const std::size_t gamma_at = offset_of(llama ? table.norm_weight() : table.lnf_weight());
  const std::size_t head_at = offset_of(llama ? table.head_weight() : ParameterTable::kWte);
  double gamma_max = 0, beta_sq = 0, row_max = 0;
  for (std::size_t c = 0; c < C; ++c) {
    gamma_max = std::max(gamma_max, std::fabs(static_cast<double>(values[gamma_at + c])));
    if (!llama) beta_sq += static_cast<double>(values[gamma_at + C + c]) * values[gamma_at + C + c];  // lnf.bias
  }
  for (std::size_t v = 0; v < config.vocab; ++v) {  // row v of the head at head_at + v * C
    double sq = 0;
    for (std::size_t c = 0; c < C; ++c)
      sq += static_cast<double>(values[head_at + v * C + c]) * values[head_at + v * C + c];
    row_max = std::max(row_max, std::sqrt(sq));
  }
  return (gamma_max * std::sqrt(static_cast<double>(C)) + std::sqrt(beta_sq)) * row_max;
}

// Runs setup.steps steps on `device_choice` (cpu or cuda). Throws what the parts throw (no usable
// GPU, --attention cudnn without cuDNN, out of memory).
inline std::vector<TracedStep> trace_training(const std::string& device_choice, const TraceSetup& setup) {
  DeviceOptions device_options;
  device_options.choice = device_choice;
  if (device_choice == "cpu") device_options.device_memory = std::size_t{1} << 30;
  const std::unique_ptr<Device> device = Device::open(device_options);
  TrainingSetup s;  // every technique's options at their defaults: none but --precision's joins
  s.model = setup.model;
  s.batch = setup.batch;
  s.precision = setup.options.precision;
  s.attention = setup.options.attention;
  s.backend = device->cuda_pattern() ? DeviceKind::cuda : DeviceKind::cpu;  // as train sets it
  s.seed = setup.seed;
  s.adam = setup.adam;
  s.max_grad_norm = 0;

  // The gradients as the optimizer gets them: a strategy after every other (the loss scaler's
  // hooks run first), joined by this trace's own technique beside the registered ones.
  struct CaptureGradients : Strategy {
    std::vector<float> gradients;
    std::string name() const override { return "capture_gradients"; }
    void before_optimizer_step(StepContext& ctx) override { gradients = ctx.model.gradient_values(); }
  };
  struct CaptureGradientsTechnique : Technique {
    std::string name() const override { return "capture_gradients"; }
    HookOrder hook_order() const override { return HookOrder::after_the_step; }
    void add_flags(CLI::App&, TrainingSetup&) const override {}
    TechniqueInRun join(RunParts&) const override { return {std::make_unique<CaptureGradients>()}; }
  } capture_technique;
  std::vector<const Technique*> list(registered_techniques().begin(), registered_techniques().end());
  list.push_back(&capture_technique);
  const Techniques techniques(list);
  const std::size_t T = setup.model.seq;
  TrainingRun run(s, techniques, *device, nullptr,
                  HostTokens(synthetic_corpus(setup.batch * T * setup.steps + 1, setup.data_seed)));
  auto& capture = *static_cast<CaptureGradients*>(run.strategy_of(capture_technique));

  std::vector<TracedStep> trace;
  for (std::size_t k = 0; k < setup.steps; ++k) {
    TracedStep t;
    t.logit_bound = logit_bound(setup.model, run.model().parameter_values());
    const StepResult r = run.step();
    t.loss = r.loss;
    t.grad_norm = r.grad_norm;
    t.loss_scale = r.loss_scale;
    t.skipped = r.skipped;
    t.gradients = std::move(capture.gradients);
    // The loss scale is a power of 2 (2^16, halved or doubled): dividing by it is exact.
    for (float& g : t.gradients) g = static_cast<float>(g / r.loss_scale);
    trace.push_back(std::move(t));
  }
  return trace;
}

// ||a - b|| / ||b|| over two gradient vectors of the same length.
inline double relative_difference(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0, norm = 0;
  for (std::size_t i = 0; i < b.size(); ++i) {
    const double d = static_cast<double>(a[i]) - b[i];
    diff += d * d;
    norm += static_cast<double>(b[i]) * b[i];
  }
  return std::sqrt(diff) / std::sqrt(norm);
}

}  // namespace trainmem::testing_support
