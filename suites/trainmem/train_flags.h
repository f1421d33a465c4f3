// The flags of `trainmem train`, shared with the commands that answer questions about a training
// run: `trainmem estimate` and `trainmem max-batch` take exactly the same model and technique
// flags, so an estimate is always an estimate of a run you can start.
//
// Each group of flags has its own add_*_flags function; a technique's flags are its registration's
// (common/train/technique.h), added by add_technique_flags.
#pragma once
#include <CLI/CLI.hpp>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/model/model_config.h"
#include "common/train/training_setup.h"
#include "suites/trainmem/cli_common.h"

namespace trainmem::cli {

// The valid range of every numeric flag, in one place: the flags' checks, their help and the
// tests use these. The model's limits keep every size a run computes below 2^62 bytes
// (common/util/checked_math.h checks the products) and `trainmem estimate` within seconds.
struct FlagLimits {
  static constexpr std::uint64_t max_layers = 1024;        // GPT-3 has 96; `estimate` takes time in proportion to L
  static constexpr std::uint64_t max_heads = 4096;
  static constexpr std::uint64_t max_dim = 65536;          // GPT-3 175B: 12288
  static constexpr std::uint64_t max_ffn_dim = 4 * max_dim;  // a GPT's 4C; Llama-3 405B's F: 53248
  static constexpr std::uint64_t max_seq = 1 << 20;        // a 1M-token context
  static constexpr std::uint64_t min_vocab = 2;
  static constexpr std::uint64_t max_vocab = kMaxVocab;    // (token files hold uint16 ids: train says so, common/data/token_file.h)
  static constexpr std::uint64_t max_batch = 1 << 20;
  static constexpr std::uint64_t max_steps = 1000000000;
  static constexpr std::uint64_t max_world_size = 1 << 20;  // estimate --world-size
};
// (A technique's flags have their ranges in its registration, suites/<name>/*_technique.cpp.)

struct TrainFlags {
  DeviceFlags device;

  // --- the model (add_model_flags); a size not given is the preset's (0 is a value, refused)
  // The shape: a preset (--model) with any of the shape flags changing it, or with no --model the
  // shape flags alone (--layers --heads --dim at least: model_config says what it filled in), or
  // neither: tiny (llama-tiny with --arch llama).
  std::string model;
  std::string hf_config;      // --hf-config: a Hugging Face config.json (or its folder) instead of --model
  std::optional<Arch> arch;   // --arch: the family (a preset has its own; they must agree)
  std::optional<std::size_t> layers, heads, dim, seq, vocab;
  std::optional<std::size_t> kv_heads, ffn_dim, head_dim;  // the Llama family's shape
  std::optional<bool> tied_head, qkv_bias;                 // its variants (model_config.h)
  std::optional<double> rope_theta, norm_eps;              // and its constants
  // A mixture of experts (model_config.h): E, k, Fe, Fs, the top-k renormalization, the
  // load-balancing loss's coefficient.
  std::optional<std::size_t> experts, experts_per_token, expert_ffn_dim, shared_expert_ffn_dim;
  std::optional<bool> normalize_top_k;
  std::optional<double> router_aux_loss;

  // --- the run's training options, each flag stored where the run reads it (training_setup.h):
  // --batch (add_model_flags), every technique's flags (add_technique_flags: the registrations,
  // suites/trainmem/techniques.h), --lr --weight-decay --grad-clip (add_optimizer_flags) and
  // --seed (add_run_flags). training_setup() below fills in the rest. The flags' defaults are
  // TrainingSetup's but for --lr: 1e-3, at which the tiny model learns within a few steps.
  TrainingSetup setup = flag_defaults();
  static TrainingSetup flag_defaults() {
    TrainingSetup s;
    s.adam.lr = 1e-3f;
    return s;
  }

  // --- data (add_data_flags)
  std::string data = "synthetic";

  // --- the run (add_run_flags; train only)
  long steps = 50;
  std::string json;
  std::string record_memory;
  std::string memory_snapshot;  // PyTorch snapshot structure (memory_snapshot.h)
};

// The model the flags describe: the preset with any overrides, validated (ModelConfigError).
ModelConfig model_config(const TrainFlags& flags);

// The run the flags describe (training_setup.h), as `trainmem train`, `estimate` and `max-batch`
// (and train's OOM advice) build it: the flags' options, the model, and what the flags do not say:
// `backend`, the device kind whose allocation pattern to follow; `dataset_tokens`, a data file's
// size in tokens (0: the synthetic corpus's, which grows with the batch); `world_size`, the ranks.
// Completed and validated by every registered technique (std::invalid_argument).
TrainingSetup training_setup(const TrainFlags& flags, DeviceKind backend, std::size_t dataset_tokens = 0,
                             std::size_t world_size = 1);

// The setup `trainmem train FLAGS` runs over `world_size` ranks following `backend`'s allocation
// pattern: FLAGS read by train's parser (CLI::ParseError), then completed and validated by every
// technique (std::invalid_argument). The planner builds its candidates with it; the tests their samples.
TrainingSetup setup_from_train_flags(const std::string& flags, DeviceKind backend = DeviceKind::cpu,
                                     std::size_t world_size = 1);
// The same from the words of a command line, each one argument ("tiny --zero 3" is one word: a
// model name, never flags): how `trainmem plan` builds its candidates.
TrainingSetup setup_from_train_flags(const std::vector<std::string>& words, DeviceKind backend = DeviceKind::cpu,
                                     std::size_t world_size = 1);

// --data checked as `trainmem train` checks it (check_dataset, common/data/dataset_check.h) for a
// global batch of `world_size` x `batch` rows, without keeping its tokens (host memory bounded);
// returns its size in tokens for TrainingSetup::dataset_tokens (synthetic: 0). DataError.
std::size_t checked_dataset_tokens(const TrainFlags& flags, std::size_t world_size, std::size_t batch);

void add_model_flags(CLI::App& command, TrainFlags& flags);      // --model, --arch, --layers ... --batch
void add_technique_flags(CLI::App& command, TrainFlags& flags);  // every registered technique's flags
void add_data_flags(CLI::App& command, TrainFlags& flags);       // --data
// --lr, --weight-decay, --grad-clip (every command: clipping decides what some techniques allow)
void add_optimizer_flags(CLI::App& command, TrainFlags& flags);
// --steps, --seed, --json, --record-memory, --memory-snapshot (train). `trainmem estimate`, which
// takes a train command line whole, declares its own --json (which takes train's FILE too).
enum class JsonFlag { result_file, the_callers };
void add_run_flags(CLI::App& command, TrainFlags& flags, JsonFlag json = JsonFlag::result_file);
// Every flag of `trainmem train`, all of the above and the device's: train's own parser, which the
// tests use too to read a technique's sample setups (Technique::sample_setups).
void add_train_flags(CLI::App& command, TrainFlags& flags);

// The flags of train that change no memory a step holds: what the run does with its numbers and
// files (and how many steps: every step from the second on holds what the second does).
// `trainmem estimate` takes them and says it ignores them.
inline const std::vector<std::string>& flags_that_change_no_memory() {
  static const std::vector<std::string> names = {"--steps", "--seed", "--lr", "--weight-decay", "--json",
                                                 "--record-memory", "--memory-snapshot"};
  return names;
}

}  // namespace trainmem::cli
