// The flags of `trainmem train`, shared with the commands that answer questions about a training
// run: `trainmem estimate` and `trainmem max-batch` take exactly the same model and technique
// flags, so an estimate is always an estimate of a run you can start.
//
// Each group of flags has its own add_*_flags function; a technique adds its fields to TrainFlags
// (in its own block) and its options to its own function in train_flags.cpp.
#pragma once
#include <CLI/CLI.hpp>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "common/model/gpt_config.h"
#include "suites/mixed_precision/loss_scaler.h"
#include "suites/trainmem/cli_common.h"

namespace trainmem::cli {

// The valid range of every numeric flag, in one place: the flags' checks, their help and the
// tests use these. The model's limits keep every size a run computes below 2^62 bytes
// (common/util/checked_math.h checks the products) and `trainmem estimate` within seconds.
struct FlagLimits {
  static constexpr std::uint64_t max_layers = 1024;        // GPT-3 has 96; `estimate` takes time in proportion to L
  static constexpr std::uint64_t max_heads = 4096;
  static constexpr std::uint64_t max_dim = 65536;          // GPT-3 175B: 12288
  static constexpr std::uint64_t max_seq = 1 << 20;        // a 1M-token context
  static constexpr std::uint64_t min_vocab = 2;
  static constexpr std::uint64_t max_vocab = 65536;        // tokens are uint16 (common/data/token_file.h)
  static constexpr std::uint64_t max_batch = 1 << 20;
  static constexpr std::uint64_t max_accum = 1 << 20;
  static constexpr std::uint64_t max_prefetch = 64;        // device batch buffers of the lazy loader
  static constexpr std::uint64_t max_steps = 1000000000;
  static constexpr std::uint64_t max_loss_scale_interval = 1000000000;
  static constexpr std::uint64_t max_world_size = 1 << 20;  // estimate --world-size
  static constexpr double min_loss_scale = 0x1p-24;       // 2^-24: both the scale and 1/scale stay normal floats
  static constexpr double max_loss_scale = 0x1p64;
};

struct TrainFlags {
  DeviceFlags device;

  // --- the model (add_model_flags); a size not given is the preset's (0 is a value, refused)
  std::string model = "tiny";
  std::optional<std::size_t> layers, heads, dim, seq, vocab;
  std::size_t batch = 4;

  // --- single-device techniques (add_technique_flags)
  std::size_t accum = 1;
  std::string recompute = "none";
  std::string precision = "fp32";
  std::string attention = "naive";
  LossScalerOptions loss_scaler;
  bool loss_scaler_flag_given = false;

  // --- data (add_data_flags)
  std::string loader = "sequential";  // sequential | eager | lazy
  std::size_t prefetch = 2;
  bool pinned = true;
  std::string data = "synthetic";

  // --- sharding (add_sharding_flags): data parallelism over the ranks of `mpirun -np N`
  int zero = -1;                 // --zero 0|1|2|3; -1: not given (0 under mpirun, none alone)
  std::string offload = "none";  // --offload none|optimizer|params (needs --zero >= 1; params: 3)
  std::string fsdp;                   // --fsdp full|grad_op|none (suites/fsdp); empty: not given
  std::string fsdp_unit = "layer";    // --fsdp-unit layer|K-layers
  std::string fsdp_prefetch = "off";  // --fsdp-prefetch on|off (not --prefetch: that is the lazy loader's)

  // --- the allocator (add_allocator_flags; train only; suites/allocator)
  // --empty-cache never|every-step|every:N: call the allocator's empty_cache() after every N-th
  // optimizer step (torch.cuda.empty_cache() as the guides advise); never: the default.
  std::string empty_cache = "never";

  // --- the run (add_run_flags; train only)
  long steps = 50;
  float lr = 1e-3f;
  float weight_decay = 0.0f;
  float grad_clip = 1.0f;
  std::uint64_t seed = 1;
  std::string json;
  std::string record_memory;
  std::string memory_snapshot;  // PyTorch snapshot structure (memory_snapshot.h)
};

// The model the flags describe: the preset with any overrides, validated (GPTConfigError).
GPTConfig model_config(const TrainFlags& flags);

void add_model_flags(CLI::App& command, TrainFlags& flags);      // --model, --layers ... --batch
void add_technique_flags(CLI::App& command, TrainFlags& flags);  // --accum, --recompute, --precision, ...
void add_data_flags(CLI::App& command, TrainFlags& flags);       // --loader, --prefetch, --pinned, --data
void add_run_flags(CLI::App& command, TrainFlags& flags);        // --steps, --lr, ..., --json, --record-memory
void add_sharding_flags(CLI::App& command, TrainFlags& flags);   // --zero, --offload, --fsdp, --fsdp-unit, --fsdp-prefetch
void add_allocator_flags(CLI::App& command, TrainFlags& flags);  // --empty-cache

}  // namespace trainmem::cli
