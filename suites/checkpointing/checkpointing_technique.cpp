#include "suites/checkpointing/checkpointing_technique.h"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "common/cli/flag_ranges.h"
#include "suites/checkpointing/recompute.h"

namespace trainmem {

namespace {

// The remedy that sets `text`: not when the run already recomputes this way, or everything.
Remedy recompute_remedy(const char* text, int cost) {
  return {cost, true, [text](const TrainingSetup& failed) {
            const RecomputePolicy policy = RecomputePolicy::parse(text);
            const RecomputePolicy::Kind now = failed.option<RecomputePolicy>().kind;
            if (now == policy.kind || now == RecomputePolicy::Kind::full) return std::vector<Remedy::Variant>{};
            Remedy::Variant v{std::string("--recompute ") + text, failed};
            v.setup.option<RecomputePolicy>() = policy;
            return std::vector<Remedy::Variant>{v};
          }};
}

class CheckpointingTechnique : public Technique {
 public:
  std::string name() const override { return "checkpointing"; }
  HookOrder hook_order() const override { return HookOrder::recomputes; }

  void add_flags(CLI::App& command, TrainingSetup& setup) const override {
    command
        .add_option_function<std::string>(
            "--recompute", [&setup](const std::string& text) { setup.option<RecomputePolicy>() = RecomputePolicy::parse(text); },
            "Activation recompute: none, full, selective, sqrt or every:K")
        ->default_str("none")
        ->check(cli::parses_with(RecomputePolicy::parse));  // checked while parsing: a one-line error
  }

  // Every policy; sqrt and every:K on more layers (segments of several), in fp16; selective on the
  // small model in bf16.
  std::vector<SampleSetup> sample_setups() const override {
    return {{"--recompute full"},
            {"--recompute selective"},
            {"--recompute sqrt"},
            {"--recompute every:2"},
            {"--recompute sqrt --model tiny --layers 5"},
            {"--recompute every:2 --model tiny --layers 4 --precision fp16"},
            {"--model small --batch 8 --precision bf16 --recompute selective"},
            {"--model llama-tiny --recompute selective --precision bf16"},
            {"--model llama-small --batch 2 --recompute sqrt --attention flash"}};
  }

  void validate(const TrainingSetup& setup, const Techniques& all) const override {
    if (setup.option<RecomputePolicy>().kind == RecomputePolicy::Kind::sqrt && all.gathers_one_layer_at_a_time(setup))
      throw std::invalid_argument("--recompute sqrt rebuilds a whole segment of layers in one layer's backward, but " +
                                  all.sharding(setup)->describe(setup) +
                                  " gathers one layer's parameters at a time: use --recompute full, selective or every:K");
  }

  TechniqueInRun join(RunParts& run) const override {
    const RecomputePolicy& policy = run.setup.option<RecomputePolicy>();
    if (policy.kind == RecomputePolicy::Kind::none) return {};
    return {std::make_unique<RecomputeStrategy>(policy)};
  }

  std::string describe(const TrainingSetup& setup) const override {
    return "recompute=" + setup.option<RecomputePolicy>().to_string();
  }
  void add_config_json(const TrainingSetup& setup, nlohmann::json& config) const override {
    config["recompute"] = setup.option<RecomputePolicy>().to_string();
  }
  // From no recompute to a whole extra forward: each saves more memory and costs more time.
  PlanChoices plan_choices(const TrainingSetup&) const override {
    return {{"", "--recompute selective", "--recompute every:2", "--recompute sqrt", "--recompute full"}, true, false};
  }
  std::vector<Remedy> remedies(const TrainingSetup&) const override {
    return {recompute_remedy("selective", kCostSmallRecompute), recompute_remedy("full", kCostFullRecompute)};
  }
  std::vector<CategoryRemedy> category_remedies(const TrainingSetup& s, const Techniques&) const override {
    switch (s.option<RecomputePolicy>().kind) {
      case RecomputePolicy::Kind::none:
        return {{MemoryCategory::activations, "activation recompute (--recompute selective|full)"}};
      case RecomputePolicy::Kind::full:
        return {};
      default:
        return {{MemoryCategory::activations, "full activation recompute (--recompute full)"}};
    }
  }
  void add_formulas(const TrainingSetup& s, FormulaBytes& f) const override {
    f.activations = predicted_activation_peak(s.model, s.batch, s.seq(), s.option<RecomputePolicy>(),
                                              storage_dtype(s.precision), s.attention);
  }
};

}  // namespace

const Technique& checkpointing_technique() { return the_technique<CheckpointingTechnique>(); }

}  // namespace trainmem
