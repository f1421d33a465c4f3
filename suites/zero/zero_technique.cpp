#include "suites/zero/zero_technique.h"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>

#include "common/cli/enum_flag.h"
#include "common/cli/flag_ranges.h"
#include "common/comm/communicator.h"
#include "common/model/model.h"
#include "suites/zero/zero_memory.h"
#include "suites/zero/zero_strategy.h"

namespace trainmem::zero {

namespace {

constexpr auto kOffloadFlag = kOffloads.renamed("--offload");  // the names common/sharding gives Offload

// What a ZeRO run adds to --json: the per-rank memory of the model states (measured, this
// implementation's exact formula and the paper's), the communication per step, the world.
// Categories as common/sharding/sharding_engine.h says: gathered units are parameters, gradient
// buckets gradients (their peaks: parameters_peak, gradients_peak); communication_peak is the
// peak of the communication category (buffers that only move bytes: 0 in training), kept for
// compatibility.
nlohmann::json zero_json(const ZeroStrategy& strategy, const RunFacts& run) {
  const Communicator& world = *run.world;
  const int N = world.world_size();
  const ZeroOptions& o = strategy.options();
  const Precision precision = run.setup.precision;
  const ZeroExactBytes x = exact_model_states(zero_units(run.setup.model), N, o.stage, precision, o.offload,
                                              run.setup.accum, gradient_lifetime(run.setup));
  const ModelStateBytes paper = paper_model_states(static_cast<double>(run.setup.model.num_parameters()), N, o.stage,
                                                   precision, o.offload);
  auto current = [&](MemoryCategory c) { return run.stats.by_category[index_of(c)].current; };
  nlohmann::json comm_by_category = nlohmann::json::object();
  for (MemoryCategory c : kAllMemoryCategories) {
    const CommCounts& k = world.stats().by_category[index_of(c)];
    if (k.calls > 0) comm_by_category[std::string(to_string(c))] = {{"volume_bytes", k.volume_bytes}, {"calls", k.calls}};
  }
  const double per_step = 1.0 / static_cast<double>(run.steps);
  return {{"stage", o.stage},
          {"offload", to_string(o.offload)},
          {"per_rank_bytes",
           {{"parameters", current(MemoryCategory::parameters)},
            {"gradients", current(MemoryCategory::gradients)},
            {"optimizer_state", current(MemoryCategory::optimizer_state)},
            {"parameters_peak", run.stats.by_category[index_of(MemoryCategory::parameters)].peak},
            {"gradients_peak", run.stats.by_category[index_of(MemoryCategory::gradients)].peak},
            {"communication_peak", run.stats.by_category[index_of(MemoryCategory::communication)].peak},
            {"host", strategy.host_bytes()}}},
          {"predicted_per_rank_bytes",
           {{"parameters", x.parameters},
            {"gradients", x.gradients},
            {"optimizer_state", x.optimizer_state},
            {"parameters_peak", x.parameters_peak},
            {"gradients_peak", x.gradients_peak},
            {"communication_peak", x.communication_peak},
            {"host", x.host}}},
          {"paper_per_rank_bytes",
           {{"parameters", paper.parameters},
            {"gradients", paper.gradients},
            {"optimizer_state", paper.optimizer_state},
            {"host", paper.host}}},
          {"comm_per_step",
           {{"volume_bytes", static_cast<double>(world.stats().total.volume_bytes) * per_step},
            {"sent_bytes", static_cast<double>(world.stats().total.sent_bytes) * per_step},
            {"seconds", world.stats().total.seconds * per_step},
            {"predicted_volume_bytes", x.volume_gradients + x.volume_parameters}}},
          {"comm_by_category", comm_by_category}};
}

class ZeroTechnique : public Technique {
 public:
  std::string name() const override { return "zero"; }
  HookOrder hook_order() const override { return HookOrder::gathers_parameters; }

  void add_flags(CLI::App& command, TrainingSetup& setup) const override {
    ZeroOptions& choice = setup.option<ZeroOptions>();
    command.add_option("--zero", choice.stage,
                       "ZeRO stage over the ranks of mpirun: 0 data parallel (gradients all-reduced), 1 shards the "
                       "optimizer state, 2 also the gradients, 3 also the parameters (default under mpirun: 0)")
        ->check(cli::whole_number(0, 3));
    cli::add_enum_flag(command, kOffloadFlag, choice.offload,
                       "ZeRO-Offload: none, optimizer (optimizer state and Adam on the host; --zero 1-3) or params "
                       "(also the parameter shards; --zero 3)");
  }

  // Every stage, in fp32 and bf16, each offload (on a world of one rank, SampleSetup); stage 3 with
  // a padded vocabulary (V = 130 to Vp = 192: the embedding's shard).
  std::vector<SampleSetup> sample_setups() const override {
    return {{"--zero 0"},
            {"--zero 1"},
            {"--zero 2"},
            {"--zero 3"},
            {"--zero 3 --precision bf16"},
            {"--zero 2 --offload optimizer"},
            {"--zero 3 --offload params"},
            {"--vocab 130 --zero 3 --precision bf16"},
            {"--model llama-tiny --zero 3 --precision bf16"}};
  }

  // Under mpirun, plain data parallelism (stage 0) unless the flags chose otherwise.
  void complete(TrainingSetup& setup, const Techniques& all) const override {
    ZeroOptions& choice = setup.option<ZeroOptions>();
    if (choice.stage < 0 && setup.world_size > 1 && !all.sharding(setup)) choice.stage = 0;
  }
  void validate(const TrainingSetup& setup, const Techniques&) const override {
    zero::validate(setup.option<ZeroOptions>(), setup.option<OptimizerInBackwardChoice>());
  }
  bool shards(const TrainingSetup& setup) const override { return setup.option<ZeroOptions>().stage >= 0; }
  // Stages 1-3 run on the sharding engine; stage 0 keeps the model's own tensors.
  bool takes_the_parameters(const TrainingSetup& setup) const override {
    return setup.option<ZeroOptions>().stage >= 1;
  }
  bool gathers_one_layer_at_a_time(const TrainingSetup& setup) const override {
    return setup.option<ZeroOptions>().stage == 3;
  }

  int sharding_stage(const TrainingSetup& s) const override { return std::max(s.option<ZeroOptions>().stage, 0); }
  // Each stage shards one more of the model states; offload moves the optimizer state to the host.
  // (Not what the run's sharding, ZeRO's or another technique's, already shards.)
  std::vector<CategoryRemedy> category_remedies(const TrainingSetup& s, const Techniques& all) const override {
    const int sharded = all.sharding_stage(s);
    std::vector<CategoryRemedy> ways;
    if (sharded < 1) ways.push_back({MemoryCategory::optimizer_state, "shard it across ranks (--zero 1 or higher)"});
    if (s.option<ZeroOptions>().offload == Offload::none)
      ways.push_back({MemoryCategory::optimizer_state, "offload it (--offload optimizer)"});
    if (sharded < 2) ways.push_back({MemoryCategory::gradients, "shard them (--zero 2)"});
    if (sharded < 3) ways.push_back({MemoryCategory::parameters, "shard them (--zero 3)"});
    return ways;
  }
  // Over N ranks: plain data parallelism, then each stage (more sharded, more communication),
  // then ZeRO-Offload; on one device only offload shards anything away.
  PlanChoices plan_choices(const TrainingSetup& setup) const override {
    PlanChoices choices{{""}, true};
    if (setup.world_size > 1) choices.flags.insert(choices.flags.end(), {"--zero 1", "--zero 2", "--zero 3"});
    choices.flags.insert(choices.flags.end(), {"--zero 2 --offload optimizer", "--zero 3 --offload params"});
    return choices;
  }
  // ZeRO-Offload, the standard answer on one device as on many: the optimizer state (12 of a
  // 16-bit model's 16 bytes a parameter) and its update move to the host (ZeRO-2, as DeepSpeed
  // offloads it), then the parameter shards too (ZeRO-3). Tried after every on-device remedy.
  std::vector<Remedy> remedies(const TrainingSetup&) const override {
    return {{kCostOffload, true, [](const TrainingSetup& failed) {
               std::vector<Remedy::Variant> variants;
               const ZeroOptions& now = failed.option<ZeroOptions>();
               auto offloaded = [&](int stage, Offload offload) {
                 Remedy::Variant v{"", failed};
                 v.setup.option<ZeroOptions>() = {stage, offload};
                 v.flags = (stage != now.stage ? "--zero " + std::to_string(stage) + " " : std::string()) +
                           "--offload " + to_string(offload);
                 variants.push_back(std::move(v));
               };
               if (now.offload == Offload::none) offloaded(std::max(now.stage, 2), Offload::optimizer);
               if (now.offload != Offload::params) offloaded(3, Offload::params);
               return variants;
             }}};
  }

  TechniqueInRun join(RunParts& run) const override {
    if (!shards(run.setup)) return {};
    const TrainingSetup& s = run.setup;
    auto strategy = std::make_unique<ZeroStrategy>(run.model, *run.world, s.option<ZeroOptions>(), s.adam, s.max_grad_norm,
                                                   s.option<GradientMode>(), s.option<OptimizerInBackwardChoice>());
    return data_parallel_in_run(std::move(strategy));
  }

  std::string describe(const TrainingSetup& setup) const override {
    const ZeroOptions& choice = setup.option<ZeroOptions>();
    if (choice.stage < 0) return {};
    std::string words = "zero=" + std::to_string(choice.stage);
    if (choice.offload != Offload::none) words += " offload=" + to_string(choice.offload);
    return words;
  }
  void add_config_json(const TrainingSetup& setup, nlohmann::json& config) const override {
    config["zero"] = setup.option<ZeroOptions>().stage;  // -1: no ZeRO
    config["offload"] = to_string(setup.option<ZeroOptions>().offload);
  }
  void add_result_json(const RunFacts& run, const Strategy* strategy, nlohmann::json& result) const override {
    if (const auto* zero = dynamic_cast<const ZeroStrategy*>(strategy)) result["zero"] = zero_json(*zero, run);
  }

  void add_formulas(const TrainingSetup& s, FormulaBytes& f) const override {
    const ZeroOptions& choice = s.option<ZeroOptions>();
    if (choice.stage < 0) return;
    const int N = static_cast<int>(s.world_size);
    const ZeroExactBytes x =
        exact_model_states(zero_units(s.model), N, choice.stage, s.precision, choice.offload, s.accum, gradient_lifetime(s));
    ShardedFormulas sharded;
    sharded.scheme = stage_name(choice.stage) + (choice.offload != Offload::none ? ", offload " + to_string(choice.offload) : "") +
                     " over " + std::to_string(N) + (N == 1 ? " rank" : " ranks");
    sharded.parameters = x.parameters;
    sharded.gradients = x.gradients;
    sharded.gradients_between_steps = x.gradients;  // what a rank holds after a step
    sharded.optimizer_state = x.optimizer_state;
    sharded.parameters_peak = x.parameters_peak;
    sharded.gradients_peak = x.gradients_peak;
    sharded.optimizer_state_peak = x.optimizer_state;  // allocated once, never changed within a step
    sharded.communication = x.communication_peak;
    sharded.host = x.host;
    sharded.paper_stage = choice.stage;
    f.sharded = sharded;
  }
  // The ZeRO paper's figures (exact in Ψ) of the stage the run's sharding matches, ZeRO's or FSDP's
  // (full = 3, grad_op = 2): the column the estimate and the report set beside the exact formula.
  void complete_formulas(const TrainingSetup& s, FormulaBytes& f) const override {
    if (!f.sharded) return;
    f.sharded->paper = paper_model_states(static_cast<double>(s.model.num_parameters()), static_cast<int>(s.world_size),
                                          f.sharded->paper_stage, s.precision, s.option<ZeroOptions>().offload);
  }
};

}  // namespace

const Technique& zero_technique() { return the_technique<ZeroTechnique>(); }

}  // namespace trainmem::zero
