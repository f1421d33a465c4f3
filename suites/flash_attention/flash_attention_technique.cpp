#include "suites/flash_attention/flash_attention_technique.h"

#include <nlohmann/json.hpp>

#include "common/model/attention_kind.h"
#include "kernels/flash_attention.h"

namespace trainmem {

namespace {

class FlashAttentionTechnique : public Technique {
 public:
  std::string name() const override { return "flash_attention"; }

  // Flash attention in fp32 and bf16, on both families (with recompute and the lazy loader: the
  // driver's combined samples, suites/trainmem/tests/sample_setups.h).
  std::vector<SampleSetup> sample_setups() const override {
    return {{"--attention flash"},
            {"--attention flash --precision bf16"},
            {"--model llama-tiny --attention flash --precision bf16"}};
  }

  // (--attention is a core option, TrainingSetup::attention: the model's kernel, declared with --batch.)
  // Not given: what a PyTorch user gets by default. On a GPU, scaled_dot_product_attention runs
  // its flash kernel for 16-bit tensors (ANCHORS.md); trainmem's CUDA flash kernels take bf16/fp16
  // and head dims 64 and 128, so those runs default to flash, the others keep naive and say why.
  // The CPU keeps naive (its flash is a reference, slower than naive's BLAS products).
  void complete(TrainingSetup& setup, const Techniques&) const override {
    AttentionDefault& choice = setup.option<AttentionDefault>();
    if (setup.attention_given || setup.backend != DeviceKind::cuda) return;
    if (setup.precision == Precision::fp32)
      choice.why_naive = "trainmem's flash runs in bf16/fp16 on a GPU";
    else if (!kernels::cuda::flash_attention_takes_head_dim(setup.model.head_dim()))
      choice.why_naive = "head dim " + std::to_string(setup.model.head_dim()) + ": the GPU flash kernels take 64 and 128";
    else
      setup.attention = AttentionKind::flash;
    choice.defaulted_on_gpu = true;
  }

  // The model's own refusals (Model::Model), found before anything is built.
  void validate(const TrainingSetup& setup, const Techniques&) const override {
    check_attention_runs(setup.attention, setup.backend == DeviceKind::cuda, setup.precision != Precision::fp32);
  }

  std::string describe(const TrainingSetup& setup) const override {
    const AttentionDefault& choice = setup.option<AttentionDefault>();
    std::string text = "attention=" + to_string(setup.attention);
    if (choice.defaulted_on_gpu)
      text += choice.why_naive.empty() ? " (the GPU default, as PyTorch's SDPA)" : " (the GPU default here: " + choice.why_naive + ")";
    return text;
  }
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
};

}  // namespace

const Technique& flash_attention_technique() { return the_technique<FlashAttentionTechnique>(); }

}  // namespace trainmem
