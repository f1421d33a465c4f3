#include "suites/lazy_loading/lazy_loading_technique.h"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <stdexcept>
#include <utility>

#include "common/allocator/allocator_config.h"
#include "common/cli/enum_flag.h"
#include "common/cli/flag_ranges.h"
#include "suites/lazy_loading/eager_loader.h"
#include "suites/lazy_loading/lazy_loader.h"

namespace trainmem::lazy_loading {

namespace {

constexpr std::uint64_t kMaxPrefetch = 64;  // device batch buffers of the lazy loader

class LazyLoadingTechnique : public Technique {
 public:
  std::string name() const override { return "lazy_loading"; }

  void add_flags(CLI::App& command, TrainingSetup& setup) const override {
    LoaderChoice& choice = setup.option<LoaderChoice>();
    cli::add_enum_flag(command, kLoaders, choice.loader,
                       "Where the dataset lives: sequential (host, in order), eager (all of it on the device) or "
                       "lazy (host, shuffled batches prefetched by a background thread)");
    command.add_option("--prefetch", choice.prefetch, "lazy: device batch buffers filled ahead (0: synchronous)")
        ->capture_default_str()
        ->check(cli::whole_number(0, kMaxPrefetch))
        ->each([&choice](const std::string&) { choice.prefetch_given = true; });
    command.add_option("--pinned", choice.pinned, "lazy: pinned host staging memory (GPU only)")
        ->capture_default_str()
        ->each([&choice](const std::string&) { choice.pinned_given = true; });
  }

  // Each loader, the lazy one with and without prefetch slots; eager in 16 bits; lazy on the Llama
  // family (with other techniques on larger batches: the driver's combined samples,
  // suites/trainmem/tests/sample_setups.h).
  std::vector<SampleSetup> sample_setups() const override {
    return {{"--loader eager"},
            {"--loader lazy"},
            {"--loader lazy --prefetch 3"},
            {"--loader lazy --prefetch 0"},
            {"--loader eager --precision bf16"},
            {"--model llama-tiny --loader lazy --precision bf16"}};
  }

  // The lazy loader's own flags mean nothing to the others: refused, not ignored.
  void validate(const TrainingSetup& setup, const Techniques&) const override {
    const LoaderChoice& choice = setup.option<LoaderChoice>();
    if (choice.loader == Loader::lazy) return;
    for (const auto& [given, flag] : {std::pair{choice.prefetch_given, "--prefetch"}, {choice.pinned_given, "--pinned"}})
      if (given)
        throw std::invalid_argument(std::string(flag) + " is the lazy loader's: add --loader lazy, or drop " + flag +
                                    " (--loader " + to_string(choice.loader) + " has no " + flag + ")");
  }

  std::unique_ptr<BatchSource> make_loader(const TrainingSetup& s, Device& device, HostTokens& tokens, std::size_t rank,
                                           std::size_t ranks) const override {
    const LoaderChoice& choice = s.option<LoaderChoice>();
    const std::size_t B = s.batch, T = s.seq();
    switch (choice.loader) {
      case Loader::sequential: return nullptr;
      case Loader::eager:  // all of it on the device
        return std::make_unique<EagerLoader>(device, std::move(tokens), B, T,
                                             EagerLoaderOptions{s.seed, true, rank, ranks, s.model.vocab});
      case Loader::lazy: {  // on the host; batches prefetched by a background thread
        LazyLoaderOptions o;
        o.prefetch = choice.prefetch;
        o.pinned = choice.pinned;
        o.seed = s.seed;
        o.rank = rank;
        o.world = ranks;
        o.vocab = s.model.vocab;
        return std::make_unique<LazyLoader>(device, std::move(tokens), B, T, o);
      }
    }
    throw std::logic_error("make_loader: unknown loader");
  }

  // sequential: the driver's (host memory); eager: the device; lazy: the host, a token file mapped.
  std::optional<DatasetHome> dataset_home(const TrainingSetup& s) const override {
    switch (s.option<LoaderChoice>().loader) {
      case Loader::sequential: return std::nullopt;
      case Loader::eager: return DatasetHome::device;
      case Loader::lazy: return DatasetHome::mapped_file;
    }
    return std::nullopt;
  }

  std::string describe(const TrainingSetup& s) const override {
    const Loader loader = s.option<LoaderChoice>().loader;
    return loader == Loader::sequential ? std::string() : "loader=" + to_string(loader);
  }
  void add_config_json(const TrainingSetup& s, nlohmann::json& config) const override {
    const LoaderChoice& choice = s.option<LoaderChoice>();
    config["loader"] = to_string(choice.loader);
    config["prefetch"] = choice.prefetch;
    config["pinned"] = choice.pinned;
  }

  std::vector<Remedy> remedies(const TrainingSetup&) const override {
    return {{kCostDataOffDevice, true, [](const TrainingSetup& failed) {
               if (failed.option<LoaderChoice>().loader != Loader::eager) return std::vector<Remedy::Variant>{};
               Remedy::Variant v{"--loader lazy", failed};
               v.setup.option<LoaderChoice>().loader = Loader::lazy;
               return std::vector<Remedy::Variant>{v};
             }}};
  }

  std::vector<CategoryRemedy> category_remedies(const TrainingSetup& s, const Techniques& all) const override {
    if (all.dataset_home(s) != DatasetHome::device) return {};  // already off the device
    return {{MemoryCategory::data, "keep the dataset on the host and stream batches (--loader lazy)"}};
  }
  std::string host_dataset_remedy() const override { return "a .tok file with --loader lazy, which memory-maps it"; }

  // The trainer's int32 tokens and targets; eager: the whole dataset as int32; lazy: `prefetch`
  // slots of tokens + targets (lazy_loader.h).
  void add_formulas(const TrainingSetup& s, FormulaBytes& f) const override {
    const LoaderChoice& choice = s.option<LoaderChoice>();
    const std::size_t batch = round_size(4 * s.batch * s.seq());
    f.data = 2 * batch;
    if (choice.loader == Loader::eager) f.data += round_size(4 * s.dataset_size());
    if (choice.loader == Loader::lazy) f.data += choice.prefetch * 2 * batch;
  }
};

}  // namespace

const Technique& lazy_loading_technique() { return the_technique<LazyLoadingTechnique>(); }

}  // namespace trainmem::lazy_loading
