#include "suites/gradient_memory/gradient_memory_technique.h"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "common/cli/enum_flag.h"
#include "suites/gradient_memory/on_demand_gradients.h"
#include "suites/gradient_memory/optimizer_in_backward.h"

namespace trainmem::gradient_memory {

namespace {

constexpr auto kGradsFlag = kGradientModes.renamed("--grads");  // the names common/train gives GradientMode

class GradientMemoryTechnique : public Technique {
 public:
  std::string name() const override { return "gradient_memory"; }
  // After the loss scaler (it reads the gradients' overflow through the optimizer first) and
  // before empty_cache, which should find the freed gradients in the cache.
  HookOrder hook_order() const override { return HookOrder::scales_loss; }

  void add_flags(CLI::App& command, TrainingSetup& setup) const override {
    cli::add_enum_flag(command, kGradsFlag, setup.option<GradientMode>(),
                       "Gradient memory: persistent (allocated with the model, zeroed after each step) or on-demand "
                       "(made at their first write in backward, freed after the step: PyTorch's set_to_none)");
    command.add_flag("--optimizer-in-backward", setup.option<OptimizerInBackwardChoice>().on,
                     "Update each parameter as soon as its gradient is complete and free that gradient at once "
                     "(needs --grad-clip 0, no gradient accumulation, no fp16; under ZeRO 1-3 or FSDP each unit's shard)");
  }

  // Gradients on demand; the optimizer in backward (no clipping), in fp32 and bf16 (over
  // accumulated micro-batches and in ZeRO's units: the driver's combined samples,
  // suites/trainmem/tests/sample_setups.h).
  std::vector<SampleSetup> sample_setups() const override {
    return {{"--grads on-demand"},
            {"--optimizer-in-backward --grad-clip 0"},
            {"--optimizer-in-backward --grad-clip 0 --precision bf16"}};
  }

  void validate(const TrainingSetup& setup, const Techniques&) const override {
    if (setup.option<OptimizerInBackwardChoice>().on) {  // what needs the whole gradient first (optimizer_in_backward.h)
      const std::string why = "--optimizer-in-backward updates each parameter before the whole gradient exists: ";
      if (setup.max_grad_norm > 0)
        throw std::invalid_argument(why + "global-norm clipping needs the whole gradient; add --grad-clip 0");
      if (setup.accum > 1)
        throw std::invalid_argument(why + "with --accum the gradient is complete only after the last micro-batch; use --accum 1");
      if (setup.precision == Precision::fp16)
        throw std::invalid_argument(why + "an fp16 overflow must skip the whole step; use --precision bf16");
    }
  }

  TechniqueInRun join(RunParts& run) const override {
    // Under sharding (ZeRO 1-3, FSDP; ZeRO-0 refuses the flag) the sharding engine updates each
    // unit's shard after its reduction (common/sharding/sharding_engine.h).
    if (run.setup.option<OptimizerInBackwardChoice>().on && run.sharding) return {};
    if (run.setup.option<OptimizerInBackwardChoice>().on) {  // also the trainer's optimizer
      auto fused = std::make_unique<OptimizerInBackward>(run.model, run.setup.adam);
      TechniqueInRun joined;
      joined.optimizer = fused.get();
      joined.strategy = std::move(fused);
      return joined;
    }
    // The model's own gradients. Under ZeRO-1-3 and FSDP they are views into the sharding
    // engine's units, which read --grads themselves (ShardingPlan::gradients_on_demand): this
    // strategy then only forgets the views the engine frees.
    if (run.setup.option<GradientMode>() != GradientMode::on_demand) return {};
    return {std::make_unique<OnDemandGradients>(run.model)};
  }

  std::string describe(const TrainingSetup& setup) const override {
    if (setup.option<OptimizerInBackwardChoice>().on) return "optimizer-in-backward";
    return setup.option<GradientMode>() == GradientMode::on_demand ? "grads=on-demand" : "";
  }
  void add_config_json(const TrainingSetup& setup, nlohmann::json& config) const override {
    config["grads"] = to_string(setup.option<GradientMode>());
    config["optimizer_in_backward"] = setup.option<OptimizerInBackwardChoice>().on;
  }

  // On demand first, then the fused update (which holds less at the backward's peak). The fused
  // update applies only where its rules hold (no clipping, no accumulation, no fp16): the advice
  // tries each variant through validate and skips one that is refused.
  // The gradients the step keeps: the same kernels, less memory held between steps and then
  // within backward (the update moves into backward: no accumulation, no sharding).
  PlanChoices plan_choices(const TrainingSetup&) const override {
    return {{"", "--grads on-demand", "--grads on-demand --optimizer-in-backward"}, true};
  }
  std::vector<Remedy> remedies(const TrainingSetup&) const override {
    return {{kCostDataOffDevice, true, [](const TrainingSetup& failed) {
               std::vector<Remedy::Variant> variants;
               if (failed.option<OptimizerInBackwardChoice>().on) return variants;
               if (failed.option<GradientMode>() != GradientMode::on_demand) {
                 Remedy::Variant v{"--grads on-demand", failed};
                 v.setup.option<GradientMode>() = GradientMode::on_demand;
                 variants.push_back(v);
               }
               Remedy::Variant fused{"--optimizer-in-backward", failed};
               fused.setup.option<OptimizerInBackwardChoice>().on = true;
               fused.setup.option<GradientMode>() = GradientMode::persistent;  // the flag frees them anyway
               variants.push_back(fused);
               return variants;
             }}};
  }

  // Gradients held after a step: none (the weight-side formula, suites/mixed_precision, counts
  // them persistent; this registration comes after it in the list).
  void add_formulas(const TrainingSetup& setup, FormulaBytes& f) const override {
    if (setup.option<GradientMode>() == GradientMode::on_demand || setup.option<OptimizerInBackwardChoice>().on)
      f.gradients = 0;
  }
};

}  // namespace

const Technique& gradient_memory_technique() { return the_technique<GradientMemoryTechnique>(); }

}  // namespace trainmem::gradient_memory
