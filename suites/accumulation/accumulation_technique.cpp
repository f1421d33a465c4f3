#include "suites/accumulation/accumulation_technique.h"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "common/cli/flag_ranges.h"

namespace trainmem {

namespace {

constexpr std::uint64_t kMaxAccum = 1 << 20;

class AccumulationTechnique : public Technique {
 public:
  std::string name() const override { return "accumulation"; }

  void add_flags(CLI::App& command, TrainingSetup& setup) const override {
    command.add_option("--accum", setup.accum, "Gradient accumulation: micro-batches per optimizer step")
        ->capture_default_str()
        ->check(cli::whole_number(1, kMaxAccum));
  }

  // Micro-batches of the default batch, and of the Llama family in bf16 (with other techniques:
  // the driver's combined samples, suites/trainmem/tests/sample_setups.h).
  std::vector<SampleSetup> sample_setups() const override {
    return {{"--accum 4"},
            {"--model llama-tiny --accum 4 --precision bf16"}};
  }

  std::string describe(const TrainingSetup& setup) const override { return "accum=" + std::to_string(setup.accum); }
  void add_config_json(const TrainingSetup& setup, nlohmann::json& config) const override { config["accum"] = setup.accum; }

  // The planner's splits of a rank's sequences per step (batch x accum) into micro-batches: every
  // divisor b of them, the largest (fastest: fewest, widest GEMMs) first.
  PlanChoices plan_choices(const TrainingSetup& setup) const override {
    PlanChoices choices{{}, true, false};
    const std::size_t sequences = setup.batch * setup.accum;
    for (std::size_t b = sequences; b >= 1; --b)
      if (sequences % b == 0)
        choices.flags.push_back("--batch " + std::to_string(b) +
                                (sequences / b > 1 ? " --accum " + std::to_string(sequences / b) : std::string()));
    return choices;
  }

  // The same tokens per step in smaller micro-batches: b < B dividing B, the largest first.
  std::vector<Remedy> remedies(const TrainingSetup&) const override {
    return {{kCostSmallerBatch, false, [](const TrainingSetup& failed) {
               std::vector<Remedy::Variant> variants;
               for (std::size_t b = failed.batch / 2; b >= 1; --b) {
                 if (failed.batch % b != 0) continue;
                 Remedy::Variant v{"", failed};
                 v.setup.batch = b;
                 v.setup.accum = failed.accum * (failed.batch / b);
                 v.flags = "--batch " + std::to_string(b) + " --accum " + std::to_string(v.setup.accum);
                 variants.push_back(std::move(v));
               }
               return variants;
             }}};
  }

  std::vector<CategoryRemedy> category_remedies(const TrainingSetup& s, const Techniques&) const override {
    if (s.batch <= 1) return {};  // no smaller micro-batch
    return {{MemoryCategory::activations, "a smaller micro-batch with gradient accumulation (--batch smaller, --accum K)"}};
  }
};

}  // namespace

const Technique& accumulation_technique() { return the_technique<AccumulationTechnique>(); }

}  // namespace trainmem
