#include "suites/flash_attention/flash_attention_technique.h"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "common/cli/enum_flag.h"
#include "common/model/attention_kind.h"

namespace trainmem {

namespace {

class FlashAttentionTechnique : public Technique {
 public:
  std::string name() const override { return "flash_attention"; }

  void add_flags(CLI::App& command, TrainingSetup& setup) const override {
    cli::add_enum_flag(command, kAttentionKinds, setup.attention,
                       "naive (saves B*H*T^2 probabilities), flash (saves O and a log-sum-exp per row), cudnn (GPU, bf16/fp16)");
  }

  // The model's own refusals (GPT::GPT), found before anything is built.
  void validate(const TrainingSetup& setup, const Techniques&) const override {
    if (setup.attention != AttentionKind::naive && setup.backend == DeviceKind::cuda && setup.precision == Precision::fp32)
      throw std::invalid_argument("--attention " + to_string(setup.attention) +
                                  " runs on a GPU in 16 bits: add --precision bf16 (or fp16)");
    if (setup.attention == AttentionKind::cudnn && setup.backend != DeviceKind::cuda)
      throw std::invalid_argument("--attention cudnn needs a CUDA device; on the CPU use --attention flash");
  }

  std::string describe(const TrainingSetup& setup) const override { return "attention=" + to_string(setup.attention); }
  void add_config_json(const TrainingSetup& setup, nlohmann::json& config) const override {
    config["attention"] = to_string(setup.attention);
  }

  // Each kernel (cuDNN's on a GPU only): their speeds differ by device and dtype, so all are timed.
  PlanChoices plan_choices(const TrainingSetup& setup) const override {
    PlanChoices choices{{"--attention naive", "--attention flash"}, false, false};
    if (setup.backend == DeviceKind::cuda) choices.flags.push_back("--attention cudnn");
    return choices;
  }
  std::vector<Remedy> remedies(const TrainingSetup&) const override {
    return {{kCostFasterKernel, true, [](const TrainingSetup& failed) {
               // on a GPU, flash attention runs in 16 bits
               if (failed.attention != AttentionKind::naive ||
                   (failed.backend == DeviceKind::cuda && failed.precision == Precision::fp32))
                 return std::vector<Remedy::Variant>{};
               Remedy::Variant v{"--attention flash", failed};
               v.setup.attention = AttentionKind::flash;
               return std::vector<Remedy::Variant>{v};
             }}};
  }

  // Flash attention in fp32 and bf16, with full recompute (its forward run twice), and on the small
  // model with the lazy loader.
  std::vector<SampleSetup> sample_setups() const override {
    return {{"--attention flash"},
            {"--attention flash --precision bf16"},
            {"--attention flash --recompute full"},
            {"--model small --batch 8 --attention flash --recompute full --loader lazy"},
            {"--model llama-tiny --attention flash --precision bf16"}};
  }
};

}  // namespace

const Technique& flash_attention_technique() {
  static const FlashAttentionTechnique technique;
  return technique;
}

}  // namespace trainmem
