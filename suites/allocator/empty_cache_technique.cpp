#include "suites/allocator/empty_cache_technique.h"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "common/cli/flag_ranges.h"
#include "suites/allocator/empty_cache_policy.h"

namespace trainmem::allocator {

namespace {

class EmptyCacheTechnique : public Technique {
 public:
  std::string name() const override { return "allocator"; }
  HookOrder hook_order() const override { return HookOrder::after_the_step; }

  void add_flags(CLI::App& command, TrainingSetup& setup) const override {
    command
        .add_option_function<std::string>(
            "--empty-cache",
            [&setup](const std::string& text) { setup.option<EmptyCachePolicy>() = EmptyCachePolicy::parse(text); },
            "Call the allocator's empty_cache() after optimizer steps: never, every-step or every:N "
            "(gives cached segments, or with expandable segments free pages, back to the device)")
        ->default_str("never")
        ->check(cli::parses_with(EmptyCachePolicy::parse));
  }

  // empty_cache after every step and every second one, with expandable segments too; and the
  // allocator configurations this suite measures: max_split_size_mb on a small card, the raw backend.
  std::vector<SampleSetup> sample_setups() const override {
    return {{"--empty-cache every-step"},
            {"--empty-cache every:2"},
            {"--allocator-config expandable_segments:True --empty-cache every-step"},
            {"--allocator-config max_split_size_mb:20 --device-memory 64MiB --model small"},
            {"--allocator-config backend:raw"},
            {"--model llama-tiny --empty-cache every-step --precision bf16"}};
  }

  TechniqueInRun join(RunParts& run) const override {
    const EmptyCachePolicy& policy = run.setup.option<EmptyCachePolicy>();
    if (policy.every == 0) return {};
    return {std::make_unique<EmptyCacheStrategy>(policy)};
  }

  std::string describe(const TrainingSetup& s) const override {
    const EmptyCachePolicy& policy = s.option<EmptyCachePolicy>();
    return policy.every == 0 ? std::string() : "empty-cache=" + policy.to_string();
  }
  void add_config_json(const TrainingSetup& s, nlohmann::json& config) const override {
    config["empty_cache"] = s.option<EmptyCachePolicy>().to_string();
  }
};

}  // namespace

const Technique& empty_cache_technique() { return the_technique<EmptyCacheTechnique>(); }

}  // namespace trainmem::allocator
