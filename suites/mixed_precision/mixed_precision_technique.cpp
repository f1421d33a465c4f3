#include "suites/mixed_precision/mixed_precision_technique.h"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "common/allocator/allocator_config.h"
#include "common/cli/enum_flag.h"
#include "common/cli/flag_ranges.h"
#include "common/model/parameter_table.h"
#include "common/model/precision.h"

namespace trainmem {

namespace {

class MixedPrecisionTechnique : public Technique {
 public:
  std::string name() const override { return "mixed_precision"; }
  HookOrder hook_order() const override { return HookOrder::scales_loss; }

  void add_flags(CLI::App& command, TrainingSetup& setup) const override {
    using cli::Bound;
    // (--precision is a core option, TrainingSetup::precision, declared with --batch.)
    // Dynamic loss scaling (fp16 only), PyTorch GradScaler's defaults.
    LossScaling& scaling = setup.option<LossScaling>();
    auto given = [&scaling](auto) { scaling.flags_given = true; };
    using Limits = LossScalerOptions;  // the ranges, said once (loss_scaler.h)
    command.add_option("--loss-scale", scaling.scaler.init_scale,
                       "fp16: initial loss scale; the scale always stays within 2^-24 to 2^64")
        ->capture_default_str()
        ->check(cli::real_number<double>(Limits::kMinScale, Bound::inclusive, Limits::kMaxScale, Bound::inclusive))
        ->each(given);
    command.add_option("--loss-scale-interval", scaling.scaler.growth_interval, "fp16: clean steps in a row before the scale grows")
        ->capture_default_str()
        ->check(cli::whole_number(1, static_cast<std::uint64_t>(Limits::kMaxInterval)))
        ->each(given);
    command.add_option("--loss-scale-growth", scaling.scaler.growth_factor, "fp16: factor on growth (more than 1, at most 65536)")
        ->capture_default_str()
        ->check(cli::real_number<double>(1, Bound::exclusive, Limits::kMaxGrowth, Bound::inclusive))
        ->each(given);
    command.add_option("--loss-scale-backoff", scaling.scaler.backoff_factor,
                       "fp16: factor after an inf/NaN step (at least 2^-16, less than 1)")
        ->capture_default_str()
        ->check(cli::real_number<double>(Limits::kMinBackoff, Bound::inclusive, 1, Bound::exclusive))
        ->each(given);
  }

  // Both 16-bit formats; fp16 with every loss-scaling flag (fp16 with recompute on the Llama
  // family: the driver's combined samples, suites/trainmem/tests/sample_setups.h).
  std::vector<SampleSetup> sample_setups() const override {
    return {{"--precision bf16"},
            {"--precision fp16"},
            {"--precision fp16 --loss-scale 1024 --loss-scale-interval 2 --loss-scale-growth 4 --loss-scale-backoff 0.25"}};
  }

  void validate(const TrainingSetup& setup, const Techniques&) const override {
    const LossScaling& scaling = setup.option<LossScaling>();
    if (scaling.flags_given && setup.precision != Precision::fp16)
      throw std::invalid_argument("--loss-scale* options apply only to --precision fp16 (bf16 and fp32 need no loss scaling)");
    scaling.scaler.validate();
  }

  TechniqueInRun join(RunParts& run) const override {
    if (run.setup.precision != Precision::fp16) return {};
    return {std::make_unique<DynamicLossScaler>(run.setup.option<LossScaling>().scaler)};
  }

  std::string describe(const TrainingSetup& setup) const override { return to_string(setup.precision); }
  void add_config_json(const TrainingSetup& setup, nlohmann::json& config) const override {
    config["precision"] = to_string(setup.precision);
  }
  void add_result_json(const RunFacts&, const Strategy* strategy, nlohmann::json& result) const override {
    const auto* scaler = dynamic_cast<const DynamicLossScaler*>(strategy);
    if (!scaler) return;
    const LossScalerOptions& o = scaler->options();
    result["config"]["loss_scaler"] = {{"init_scale", o.init_scale},
                                       {"growth_factor", o.growth_factor},
                                       {"backoff_factor", o.backoff_factor},
                                       {"growth_interval", o.growth_interval},
                                       {"skipped_steps", scaler->skipped_steps()}};
  }

  // Every storage type: which is fastest depends on the device (tensor cores, or the CPU's staging).
  PlanChoices plan_choices(const TrainingSetup&) const override {
    return {{"--precision fp32", "--precision bf16", "--precision fp16"}, false};
  }
  std::vector<Remedy> remedies(const TrainingSetup&) const override {
    return {{kCostFewerBits, true, [](const TrainingSetup& failed) {
               if (failed.precision != Precision::fp32) return std::vector<Remedy::Variant>{};
               Remedy::Variant v{"--precision bf16", failed};
               v.setup.precision = Precision::bf16;
               return std::vector<Remedy::Variant>{v};
             }}};
  }

  // 16 bits halve what each weight, gradient and activation takes.
  std::vector<CategoryRemedy> category_remedies(const TrainingSetup& s, const Techniques&) const override {
    if (s.precision != Precision::fp32) return {};
    return {{MemoryCategory::activations, "16-bit activations (--precision bf16)"},
            {MemoryCategory::gradients, "16-bit gradients (--precision bf16)"},
            {MemoryCategory::parameters, "16-bit weights (--precision bf16)"}};
  }

  // precision_memory.h: bytes per parameter per category, each tensor rounded to 512 bytes; the
  // optimizer's fp32 tensors (m, v and, in 16 bits, the master weights) are 4 bytes each.
  void add_formulas(const TrainingSetup& s, FormulaBytes& f) const override {
    const BytesPerParameter b = bytes_per_parameter(s.precision);
    const ParameterTable table(s.model);
    for (const ParameterInfo& p : table.all()) {
      const std::size_t n = p.numel();
      f.parameters += round_size(n * b.parameters);
      f.gradients += round_size(n * b.gradients);
      f.optimizer_state += (b.optimizer_state / 4) * round_size(n * 4);
    }
  }
};

}  // namespace

const Technique& mixed_precision_technique() { return the_technique<MixedPrecisionTechnique>(); }

}  // namespace trainmem
