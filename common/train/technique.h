// A technique's registration: the one object through which a suite joins the driver.
//
// Each suite (suites/<name>/) defines one Technique in its own folder, holding everything the
// driver needs of it:
//
//   add_flags      its command-line flags, stored in its options (TrainingSetup::option<T>()); none
//                  where it measures a model option (--precision, --attention: common/README.md)
//   validate       the rules of its options, alone and with the rest of the setup
//   join           what it adds to a run: a strategy (trainer hooks, strategy.h), maybe an
//                  optimizer (sharding), maybe the data loader
//   describe       its words in the progress line and in messages: "recompute=selective"
//   add_config_json / add_result_json   its part of `trainmem train --json`
//   remedies       its ways out of an out-of-memory, for the OOM advice: setups the estimator
//                  tries; category_remedies the words for each category of memory it shrinks;
//                  host_dataset_remedy for a dataset larger than the host's memory
//   add_formulas   its closed-form memory (formula_bytes.h), for the estimate and the report;
//                  complete_formulas what depends on the others' (ZeRO: the paper's figures)
//   dataset_home   where the run holds the dataset, when it provides the loader
//   sample_setups  small configurations that exercise its options, as flags: the driver's tests
//                  run each (the meta device against the CPU, the estimator against real
//                  training, the techniques two at a time), so a new technique is tested there
//                  without editing them
//
// The build lists the registrations from the suites' manifests (trainmem_add_technique in each
// suite's CMakeLists.txt, cmake/TrainmemTechniques.cmake, generates registered_techniques()), and
// every command -- train, estimate, max-batch -- and every benchmark builds its run from the same
// list with TrainingRun (training_run.h). Adding a technique is its folder, manifest included.
#pragma once
// CLI::App and nlohmann::json are only named here (by reference): their declarations suffice,
// and the files that fill them include the full headers. CLI11's header alone costs ~4 s of
// compile time in every file that includes it.
#include <nlohmann/json_fwd.hpp>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/allocator/memory_stats.h"
#include "common/allocator/memory_category.h"
#include "common/data/batch_source.h"
#include "common/train/data_parallel_strategy.h"
#include "common/train/formula_bytes.h"
#include "common/train/strategy.h"
#include "common/train/training_setup.h"

namespace CLI {
class App;
}

namespace trainmem {

class Communicator;
class Device;
class Model;
class HostTokens;
class Optimizer;
class Technique;

// What a run is made of when a technique joins it.
struct RunParts {
  const TrainingSetup& setup;
  Device& device;
  Model& model;
  Communicator* world;  // nullptr: a single process
  const Technique* sharding = nullptr;  // the run's data parallelism (Techniques::sharding), or none
};

// What a technique adds to one run (Technique::join).
struct TechniqueInRun {
  std::unique_ptr<Strategy> strategy;  // its hooks (nullptr: none)
  Optimizer* optimizer = nullptr;      // instead of the trainer's AdamW (owned by the strategy)
  // The factor of the strategy's loss_scale() that is this rank's share of the global mean (1/N
  // for data parallelism), not a loss scale: the run divides it out of the scale it reports.
  double loss_share = 1.0;
};

// A data-parallel strategy with its own optimizer over the shards (ZeRO, FSDP;
// data_parallel_strategy.h): what it adds to a run. Its loss_scale() is this rank's share of the
// global mean (1/N).
inline TechniqueInRun data_parallel_in_run(std::unique_ptr<DataParallelStrategy> strategy) {
  TechniqueInRun joined;
  joined.optimizer = &strategy->optimizer();
  joined.loss_share = strategy->loss_scale();
  joined.strategy = std::move(strategy);
  return joined;
}

// What `trainmem train --json` knows at the end of a run, for a technique's result section.
struct RunFacts {
  const TrainingSetup& setup;
  const Model& model;
  const Communicator* world;
  const MemoryStats& stats;  // the allocator's, at the end
  long steps;
};

// One way out of an out-of-memory that a technique offers. The OOM advice (oom_advice.cpp) tries
// the remedies of every technique, the cheapest first, alone and then with the cheaper remedies
// of the other techniques, and names the first that fits.
struct Remedy {
  int cost;  // time it costs, in rank order (RemedyCost): the cheapest is tried first
  bool combines = true;  // may be tried together with cheaper remedies of other techniques
  // The setups to try, in order, each with the flags that make it (none: it does not apply).
  struct Variant {
    std::string flags;  // "--recompute selective"
    TrainingSetup setup;
  };
  std::function<std::vector<Variant>(const TrainingSetup&)> variants;
};
// A way a technique offers to shrink one category of memory, for the OOM advice's lines of what
// would help: "activations: activation recompute (--recompute selective|full)".
struct CategoryRemedy {
  MemoryCategory category;
  std::string words;  // what to do, with its flags: "activation recompute (--recompute selective|full)"
};
// The ranks of the remedies' costs, cheapest first.
enum RemedyCost : int {
  kCostDataOffDevice = 1,  // the dataset leaves the device: copies overlap compute
  kCostFasterKernel = 2,   // a kernel that is also faster (flash attention)
  kCostFewerBits = 3,      // 16-bit storage: faster on tensor cores
  kCostSmallRecompute = 4, // rebuild a few cheap tensors: a few % more time
  kCostSmallerBatch = 5,   // the same tokens in smaller micro-batches: less parallelism
  kCostFullRecompute = 6,  // one more forward per step: about a third more time
  kCostOffload = 7,        // the optimizer state and its update on the host: the update on the CPU,
                           // the gradients and weights over PCIe every step (ZeRO-Offload)
};

// Where a run holds the dataset (Technique::dataset_home): what the driver needs to know to load
// it, and the estimate to count it.
enum class DatasetHome {
  host_memory,  // read into host memory, batches taken from there (the driver's SequentialBatches)
  device,       // all of it on the device (its size is device memory, category data)
  mapped_file,  // on the host, and a token file is memory-mapped rather than read into the heap
};

// A small configuration that exercises a technique's options, written as a user writes it after
// `trainmem train`: "--recompute every:2 --model tiny --layers 4 --precision fp16". It may name other flags
// where the combination is the point (the tiny model with one layer more, a precision). The tests
// parse it with train's own flags and run it in one process: a sharding technique's samples run
// on a world of one rank (test_estimate_ranks runs more).
struct SampleSetup {
  std::string flags;
};

class Techniques;

class Technique {
 public:
  virtual ~Technique() = default;
  virtual std::string name() const = 0;  // its suite's folder: "checkpointing"

  // Where its strategy goes in the trainer's list (strategies are called in this order at every
  // hook): a strategy that gathers parameters must run before one that recomputes a layer.
  enum class HookOrder { gathers_parameters, recomputes, scales_loss, after_the_step };
  virtual HookOrder hook_order() const { return HookOrder::recomputes; }

  // Its flags (none: a technique that measures a model option, declared with the shape's flags by
  // the driver's train flags: --precision, --attention; common/README.md).
  virtual void add_flags(CLI::App& /*command*/, TrainingSetup& /*setup*/) const {}
  // Fills in what its options leave to the rest of the setup, once the world size is known (ZeRO:
  // plain data parallelism under mpirun when no other technique shards).
  virtual void complete(TrainingSetup&, const Techniques& /*all*/) const {}
  // Throws std::invalid_argument naming the flag to change. `all`: to ask how it combines.
  virtual void validate(const TrainingSetup&, const Techniques& /*all*/) const {}
  // Whether it spreads the model over the ranks (then the run needs a communicator, and the
  // first one that does is the run's data parallelism).
  virtual bool shards(const TrainingSetup&) const { return false; }
  // Whether its join moves the model's parameters into a sharding engine's units
  // (common/sharding/sharding_engine.h): the run then builds the model with its values on the host
  // and no gradients (ModelOptions::values_on_host), so the whole model is never on the device.
  virtual bool takes_the_parameters(const TrainingSetup&) const { return false; }
  // Whether a layer's parameters exist only while it computes (then a recompute that rebuilds
  // other layers than the one in backward cannot compose with it).
  virtual bool gathers_one_layer_at_a_time(const TrainingSetup&) const { return false; }

  // The data loader, when this technique provides it (nullptr: the driver's SequentialBatches).
  virtual std::unique_ptr<BatchSource> make_loader(const TrainingSetup&, Device&, HostTokens&, std::size_t /*rank*/,
                                                   std::size_t /*ranks*/) const {
    return nullptr;
  }
  // Where the run holds the dataset, when this technique provides the loader (nullopt: it does not).
  virtual std::optional<DatasetHome> dataset_home(const TrainingSetup&) const { return std::nullopt; }
  // What it adds to a run; nothing when the setup does not use it.
  virtual TechniqueInRun join(RunParts&) const { return {}; }

  virtual std::string describe(const TrainingSetup&) const { return {}; }  // "" when not used
  virtual void add_config_json(const TrainingSetup&, nlohmann::json& /*config*/) const {}
  virtual void add_result_json(const RunFacts&, const Strategy* /*its strategy or nullptr*/, nlohmann::json& /*result*/) const {}
  virtual std::vector<Remedy> remedies(const TrainingSetup&) const { return {}; }
  // Its ways to shrink each category of memory, but those the setup already uses (`all`: to ask
  // what the other techniques do).
  virtual std::vector<CategoryRemedy> category_remedies(const TrainingSetup&, const Techniques& /*all*/) const {
    return {};
  }
  // What to do, with its flags, when the dataset does not fit in the host's memory
  // (DatasetExceedsHostMemory, common/data/token_file.h): a loader that needs no host copy says how.
  virtual std::string host_dataset_remedy() const { return {}; }
  // Which model states it spreads over the ranks, as ZeRO's stages count them: 1 the optimizer
  // state, 2 the gradients too, 3 the parameters too (0: none, or plain data parallelism).
  virtual int sharding_stage(const TrainingSetup&) const { return 0; }
  virtual void add_formulas(const TrainingSetup&, FormulaBytes&) const {}
  // Called after every technique's add_formulas: what it adds that depends on the others' (ZeRO:
  // the paper's figures of the stage whose arithmetic the run's sharding matches, FSDP's included).
  virtual void complete_formulas(const TrainingSetup&, FormulaBytes&) const {}

  // The settings of its options `trainmem plan` searches, as flags ("": the technique off), the
  // fastest first where its settings trade time for memory (the planner stops at the first that
  // fits, all else equal, when `trades_time_for_memory`). Empty: the planner keeps the user's.
  struct PlanChoices {
    std::vector<std::string> flags;
    bool trades_time_for_memory = false;
    // Whether its settings change what the model states take (parameters, gradients, optimizer
    // state): a mix whose states alone do not fit then rules out every mix with the same settings.
    bool sizes_model_states = true;
  };
  virtual PlanChoices plan_choices(const TrainingSetup&) const { return {}; }

  // Its samples (SampleSetup): the tests' configurations of it. A registered technique gives at
  // least one (TechniquePairs.EveryTechniqueGivesSamplesThatTrainTakes checks).
  virtual std::vector<SampleSetup> sample_setups() const { return {}; }
};

// The one instance of a technique's class, made on first use: what its registration function
// returns (`const Technique& zero_technique() { return the_technique<ZeroTechnique>(); }`); the
// registry and every run hold references to it.
template <class T>
const Technique& the_technique() {
  static const T technique;
  return technique;
}

// The registered techniques, in the order the progress line names them.
class Techniques {
 public:
  Techniques(std::initializer_list<const Technique*> list) : list_(list) {}
  explicit Techniques(std::vector<const Technique*> list) : list_(std::move(list)) {}
  auto begin() const { return list_.begin(); }
  auto end() const { return list_.end(); }

  void add_flags(CLI::App& command, TrainingSetup& setup) const;
  void complete(TrainingSetup& setup) const;         // every technique's complete(), in order
  void validate(const TrainingSetup& setup) const;   // the core's rules, then every technique's
  // The technique that shards the model over the ranks (nullptr: none; a communicator is needed
  // when there is one).
  const Technique* sharding(const TrainingSetup& setup) const;
  bool gathers_one_layer_at_a_time(const TrainingSetup& setup) const;
  // Every technique's words: "bf16 accum=4 recompute=selective attention=flash ...".
  std::string describe(const TrainingSetup& setup) const;
  FormulaBytes formulas(const TrainingSetup& setup) const;  // every add_formulas, then every complete_formulas
  // Where the run holds the dataset: the first technique's that says (host_memory: none does).
  DatasetHome dataset_home(const TrainingSetup& setup) const;
  // Which model states the run shards (Technique::sharding_stage of its sharding; 0: none).
  int sharding_stage(const TrainingSetup& setup) const;
  // Every technique's category_remedies for `category`, in the order of registration.
  std::vector<std::string> category_remedies(const TrainingSetup& setup, MemoryCategory category) const;
  // Every technique's host_dataset_remedy, in the order of registration.
  std::vector<std::string> host_dataset_remedies() const;

 private:
  std::vector<const Technique*> list_;
};

}  // namespace trainmem
