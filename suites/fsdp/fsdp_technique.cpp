#include "suites/fsdp/fsdp_technique.h"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>

#include "common/cli/enum_flag.h"
#include "common/cli/flag_ranges.h"
#include "common/comm/communicator.h"
#include "common/model/model.h"
#include "suites/fsdp/fsdp_memory.h"
#include "suites/fsdp/fsdp_strategy.h"

namespace trainmem::fsdp {

namespace {

// What an FSDP run adds to --json: the per-rank peaks of the model states, measured (since the
// model was sharded) and predicted by fsdp_memory.h, the units gathered at the peak, and the
// communication per step.
nlohmann::json fsdp_json(const FsdpStrategy& strategy, const RunFacts& run) {
  const Communicator& world = *run.world;
  const auto N = static_cast<std::size_t>(world.world_size());
  const FsdpMemory x = fsdp_memory(run.setup.model, N, strategy.options(), run.setup.precision,
                                   gradient_lifetime(run.setup), run.setup.accum);
  auto peak = [&](MemoryCategory c) { return run.stats.by_category[index_of(c)].peak; };
  const bool sharded = strategy.options().mode != ShardingMode::none;
  const double steps = static_cast<double>(run.steps);
  return {{"peaks_since", "sharding"},
          {"per_rank_peak_bytes",
           {{"parameters", peak(MemoryCategory::parameters)},
            {"gradients", peak(MemoryCategory::gradients)},
            {"optimizer_state", peak(MemoryCategory::optimizer_state)}}},
          {"predicted_per_rank_peak_bytes",
           {{"parameters", x.parameters_peak_bytes},
            {"gradients", x.gradients_peak_bytes},
            {"optimizer_state", x.optimizer_state_peak_bytes}}},
          {"layer_units_gathered_at_peak", sharded ? strategy.peak_gathered_layer_units() : x.layer_units_gathered_at_peak},
          {"predicted_layer_units_gathered_at_peak", x.layer_units_gathered_at_peak},
          {"comm_per_step",
           {{"volume_bytes", static_cast<double>(world.stats().total.volume_bytes) / steps},
            {"seconds", world.stats().total.seconds / steps},
            {"predicted_volume_bytes",
             fsdp_comm_volume_per_step(run.setup.model, N, strategy.options(), run.setup.precision, run.setup.accum)}}}};
}

class FsdpTechnique : public Technique {
 public:
  std::string name() const override { return "fsdp"; }
  HookOrder hook_order() const override { return HookOrder::gathers_parameters; }

  void add_flags(CLI::App& command, TrainingSetup& setup) const override {
    FsdpChoice& choice = setup.option<FsdpChoice>();
    CLI::Option* fsdp = cli::takes_one_of(
        command.add_option_function<std::string>(
            "--fsdp",
            [&choice](const std::string& text) {
              choice.enabled = true;
              choice.options.mode = kShardingModes.parse(text);
            },
            "Fully sharded data parallel over the ranks of mpirun: full (FULL_SHARD), grad_op "
            "(SHARD_GRAD_OP) or none (NO_SHARD: plain data parallel); one sharding technique at a time (not with ZeRO)"),
        kShardingModes);
    // The unit and prefetch flags shape FSDP: without --fsdp they would be silently ignored.
    command
        .add_option_function<std::string>(
            "--fsdp-unit", [&choice](const std::string& text) { choice.options.layers_per_unit = parse_layers_per_unit(text); },
            "FSDP unit: layer, or K-layers (K consecutive layers, e.g. 2-layers)")
        ->default_str("layer")
        ->check(cli::parses_with(parse_layers_per_unit))
        ->needs(fsdp);
    cli::add_enum_flag(command, kFsdpPrefetch, choice.options.prefetch,
                       "FSDP: gather the next unit while the current one computes: on or off (the lazy loader's "
                       "--prefetch N is another flag)")
        ->needs(fsdp);
  }

  // Each sharding mode, prefetch, a unit of two layers, fp16 (on a world of one rank, SampleSetup).
  std::vector<SampleSetup> sample_setups() const override {
    return {{"--fsdp full"},
            {"--fsdp full --fsdp-prefetch on"},
            {"--fsdp full --fsdp-unit 2-layers"},
            {"--fsdp grad_op --precision fp16"},
            {"--fsdp none"},
            {"--model llama-tiny --fsdp full --precision bf16"}};
  }

  // Over N ranks: SHARD_GRAD_OP (parameters whole between forward and backward), then FULL_SHARD.
  PlanChoices plan_choices(const TrainingSetup& setup) const override {
    if (setup.world_size < 2) return {{""}, true};
    // Fastest first: prefetch overlaps the next unit's gather with this one's compute (on NCCL's
    // stream) for one more unit gathered; without it every gather waits in line.
    return {{"", "--fsdp grad_op", "--fsdp full --fsdp-prefetch on", "--fsdp full"}, true};
  }

  void validate(const TrainingSetup& setup, const Techniques& all) const override {
    const Technique* sharding = all.sharding(setup);
    if (shards(setup) && sharding != this)
      throw std::invalid_argument("--fsdp " + to_string(setup.option<FsdpChoice>().options.mode) + " and " +
                                  sharding->describe(setup) +
                                  " both shard the model states over the ranks: give one of them");
  }
  bool shards(const TrainingSetup& setup) const override { return setup.option<FsdpChoice>().enabled; }
  bool takes_the_parameters(const TrainingSetup& setup) const override { return shards(setup); }  // every mode
  bool gathers_one_layer_at_a_time(const TrainingSetup& setup) const override {
    const FsdpChoice& choice = setup.option<FsdpChoice>();
    return choice.enabled && choice.options.mode == ShardingMode::full;
  }

  TechniqueInRun join(RunParts& run) const override {
    if (!shards(run.setup)) return {};
    auto strategy = std::make_unique<FsdpStrategy>(run.model, *run.world, run.setup.option<FsdpChoice>().options,
                                                   run.setup.adam, run.setup.max_grad_norm,
                                                   run.setup.option<GradientMode>(),
                                                   run.setup.option<OptimizerInBackwardChoice>());
    return data_parallel_in_run(std::move(strategy));
  }

  std::string describe(const TrainingSetup& setup) const override {
    const FsdpChoice& choice = setup.option<FsdpChoice>();
    if (!choice.enabled) return {};
    return "fsdp=" + to_string(choice.options.mode) + " unit=" + unit_to_string(choice.options.layers_per_unit) +
           " prefetch=" + std::string(kFsdpPrefetch.name(choice.options.prefetch));
  }
  void add_config_json(const TrainingSetup& setup, nlohmann::json& config) const override {
    const FsdpChoice& choice = setup.option<FsdpChoice>();
    config["fsdp"] = nullptr;  // null: no FSDP
    if (choice.enabled)
      config["fsdp"] = {{"mode", to_string(choice.options.mode)},
                        {"unit", unit_to_string(choice.options.layers_per_unit)},
                        {"prefetch", choice.options.prefetch}};
  }
  void add_result_json(const RunFacts& run, const Strategy* strategy, nlohmann::json& result) const override {
    if (const auto* fsdp = dynamic_cast<const FsdpStrategy*>(strategy)) result["fsdp"] = fsdp_json(*fsdp, run);
  }

  // FULL_SHARD shards what ZeRO-3 does, SHARD_GRAD_OP what ZeRO-2 does, NO_SHARD nothing.
  int sharding_stage(const TrainingSetup& s) const override {
    const FsdpChoice& fsdp = s.option<FsdpChoice>();
    if (!fsdp.enabled) return 0;
    return fsdp.options.mode == ShardingMode::full ? 3 : fsdp.options.mode == ShardingMode::grad_op ? 2 : 0;
  }
  void add_formulas(const TrainingSetup& s, FormulaBytes& f) const override {
    const FsdpChoice& choice = s.option<FsdpChoice>();
    if (!choice.enabled) return;
    const FsdpMemory m = fsdp_memory(s.model, s.world_size, choice.options, s.precision, gradient_lifetime(s), s.accum);
    ShardedFormulas sharded;
    sharded.scheme = "FSDP " + to_string(choice.options.mode) + " over " + std::to_string(s.world_size) +
                     (s.world_size == 1 ? " rank" : " ranks");
    sharded.peaks = true;
    sharded.parameters = m.parameters_peak_bytes;
    sharded.gradients = m.gradients_peak_bytes;
    sharded.optimizer_state = m.optimizer_state_peak_bytes;
    sharded.parameters_peak = sharded.parameters;
    sharded.gradients_peak = sharded.gradients;
    sharded.optimizer_state_peak = sharded.optimizer_state;
    sharded.gradients_between_steps = m.gradients_between_steps_bytes;
    // The ZeRO paper's formula of the stage FSDP's mode shards as applies (the estimator puts it
    // beside these figures)
    sharded.paper_stage = sharding_stage(s);
    f.sharded = sharded;
  }
};

}  // namespace

const Technique& fsdp_technique() { return the_technique<FsdpTechnique>(); }

}  // namespace trainmem::fsdp
