#include "suites/trainmem/train_flags.h"

#include <limits>

#include "common/model/attention_kind.h"
#include "common/model/precision.h"
#include "suites/allocator/empty_cache_policy.h"
#include "suites/checkpointing/recompute.h"
#include "suites/fsdp/fsdp_options.h"
#include "suites/trainmem/flag_ranges.h"

namespace trainmem::cli {

GPTConfig model_config(const TrainFlags& f) {
  GPTConfig c = gpt_preset(f.model);
  if (f.layers) c.layers = *f.layers;
  if (f.heads) c.heads = *f.heads;
  if (f.dim) c.dim = *f.dim;
  if (f.seq) c.seq = *f.seq;
  if (f.vocab) c.vocab = *f.vocab;
  if (f.layers || f.heads || f.dim || f.seq || f.vocab) c.name = f.model + "+custom";
  c.validate();
  check_run_sizes(c, f.batch);  // every size the run computes stays below 2^62 bytes
  return c;
}

void add_model_flags(CLI::App& command, TrainFlags& flags) {
  command.add_option("--model", flags.model, "Preset: tiny, small, gpt2-124m, gpt2-350m, gpt2-774m, gpt2-1.5b")
      ->capture_default_str();
  using L = FlagLimits;
  command.add_option("--layers", flags.layers, "Override the preset's number of layers L")->check(whole_number(1, L::max_layers));
  command.add_option("--heads", flags.heads, "Override the number of attention heads H")->check(whole_number(1, L::max_heads));
  command.add_option("--dim", flags.dim, "Override the width C")->check(whole_number(1, L::max_dim));
  command.add_option("--seq", flags.seq, "Override the context length T (also the training sequence length)")
      ->check(whole_number(1, L::max_seq));
  command.add_option("--vocab", flags.vocab, "Override the vocabulary size V")->check(whole_number(L::min_vocab, L::max_vocab));
  command.add_option("--batch", flags.batch, "Micro-batch size B")->capture_default_str()->check(whole_number(1, L::max_batch));
}

void add_technique_flags(CLI::App& command, TrainFlags& flags) {
  command.add_option("--accum", flags.accum, "Gradient accumulation: micro-batches per optimizer step")
      ->capture_default_str()
      ->check(whole_number(1, FlagLimits::max_accum));
  command.add_option("--recompute", flags.recompute, "Activation recompute: none, full, selective, sqrt or every:K")
      ->capture_default_str()
      ->check(parses_with(RecomputePolicy::parse));  // checked while parsing: a one-line error
  command.add_option("--precision", flags.precision,
                     "fp32, or bf16/fp16: 16-bit weights, gradients and activations with fp32 master weights")
      ->capture_default_str()
      ->check(parses_with(parse_precision));
  command.add_option("--attention", flags.attention,
                     "naive (saves B*H*T^2 probabilities), flash (saves O and a log-sum-exp per row), "
                     "cudnn (GPU, bf16/fp16)")
      ->capture_default_str()
      ->check(parses_with(parse_attention));
  // Dynamic loss scaling (fp16 only), PyTorch GradScaler's defaults.
  auto given = [&flags](auto) { flags.loss_scaler_flag_given = true; };
  command.add_option("--loss-scale", flags.loss_scaler.init_scale, "fp16: initial loss scale")
      ->capture_default_str()
      ->check(real_number(FlagLimits::min_loss_scale, Bound::inclusive, FlagLimits::max_loss_scale, Bound::inclusive))
      ->each(given);
  command.add_option("--loss-scale-interval", flags.loss_scaler.growth_interval,
                     "fp16: clean steps in a row before the scale grows")
      ->capture_default_str()->check(whole_number(1, FlagLimits::max_loss_scale_interval))->each(given);
  command.add_option("--loss-scale-growth", flags.loss_scaler.growth_factor, "fp16: factor on growth (> 1)")
      ->capture_default_str()->check(real_number(1, Bound::exclusive, 1e6, Bound::inclusive))->each(given);
  command.add_option("--loss-scale-backoff", flags.loss_scaler.backoff_factor,
                     "fp16: factor after an inf/NaN step (between 0 and 1)")
      ->capture_default_str()->check(real_number(0, Bound::exclusive, 1, Bound::exclusive))->each(given);
}

void add_data_flags(CLI::App& command, TrainFlags& flags) {
  command.add_option("--loader", flags.loader,
                     "Where the dataset lives: sequential (host, in order), eager (all of it on the device) or "
                     "lazy (host, shuffled batches prefetched by a background thread)")
      ->capture_default_str()
      ->check(CLI::IsMember({"sequential", "eager", "lazy"}));
  command.add_option("--prefetch", flags.prefetch, "lazy: device batch buffers filled ahead (0: synchronous)")
      ->capture_default_str()
      ->check(whole_number(0, FlagLimits::max_prefetch));
  command.add_option("--pinned", flags.pinned, "lazy: pinned host staging memory (GPU only)")->capture_default_str();
  command.add_option("--data", flags.data, "synthetic, a .tok token file, or any file (tokenized byte by byte)")
      ->capture_default_str();
}

void add_run_flags(CLI::App& command, TrainFlags& flags) {
  // lr, weight decay and the clip norm are floats: finite, and at most the largest float.
  constexpr double max_float = std::numeric_limits<float>::max();
  command.add_option("--steps", flags.steps, "Optimizer steps")->capture_default_str()->check(whole_number(1, FlagLimits::max_steps));
  command.add_option("--lr", flags.lr, "AdamW learning rate")
      ->capture_default_str()
      ->check(real_number(0, Bound::exclusive, max_float, Bound::inclusive));
  command.add_option("--weight-decay", flags.weight_decay, "AdamW weight decay")
      ->capture_default_str()
      ->check(real_number(0, Bound::inclusive, max_float, Bound::inclusive));
  command.add_option("--grad-clip", flags.grad_clip, "Clip the global gradient norm to this (0: off)")
      ->capture_default_str()
      ->check(real_number(0, Bound::inclusive, max_float, Bound::inclusive));
  command.add_option("--seed", flags.seed, "Seed for the initialization and the synthetic corpus")
      ->capture_default_str()
      ->check(whole_number(0, std::numeric_limits<std::uint64_t>::max()));
  command.add_option("--json", flags.json, "Write the run's result (config, device, per-step figures, memory) here");
  command.add_option("--record-memory", flags.record_memory, "Write the allocator's event log (every alloc/free) here");
  command.add_option("--memory-snapshot", flags.memory_snapshot,
                     "Write the recorded trace and the final segments in PyTorch's snapshot structure (JSON) here; "
                     "the report tool turns it into the pickle pytorch.org/memory_viz opens");
}

void add_allocator_flags(CLI::App& command, TrainFlags& flags) {
  command.add_option("--empty-cache", flags.empty_cache,
                     "Call the allocator's empty_cache() after optimizer steps: never, every-step or every:N "
                     "(gives cached segments, or with expandable segments free pages, back to the device)")
      ->capture_default_str()
      ->check(parses_with(allocator::EmptyCachePolicy::parse));
}

void add_sharding_flags(CLI::App& command, TrainFlags& flags) {
  command.add_option("--zero", flags.zero,
                     "ZeRO stage over the ranks of mpirun: 0 data parallel (gradients all-reduced), 1 shards the "
                     "optimizer state, 2 also the gradients, 3 also the parameters (default under mpirun: 0)")
      ->check(whole_number(0, 3));
  command.add_option("--offload", flags.offload,
                     "ZeRO-Offload: none, optimizer (optimizer state and Adam on the host; --zero 1-3) or params "
                     "(also the parameter shards; --zero 3)")
      ->capture_default_str()
      ->check(CLI::IsMember({"none", "optimizer", "params"}));
  // FSDP (suites/fsdp): the values are checked by the suite's own parsers, so the message is theirs.
  const auto fsdp_check = [](auto parse) {
    return [parse](const std::string& text) {
      try {
        parse(text);
        return std::string();
      } catch (const std::invalid_argument& e) {
        return std::string(e.what());
      }
    };
  };
  command.add_option("--fsdp", flags.fsdp,
                     "Fully sharded data parallel over the ranks of mpirun: full (FULL_SHARD), grad_op "
                     "(SHARD_GRAD_OP) or none (NO_SHARD: plain data parallel); not with --zero")
      ->check(fsdp_check([](const std::string& t) { fsdp::parse_sharding_mode(t); }));
  command.add_option("--fsdp-unit", flags.fsdp_unit, "FSDP unit: layer, or K-layers (K consecutive layers, e.g. 2-layers)")
      ->capture_default_str()
      ->check(fsdp_check([](const std::string& t) { fsdp::parse_layers_per_unit(t); }));
  command.add_option("--fsdp-prefetch", flags.fsdp_prefetch,
                     "FSDP: gather the next unit while the current one computes: on or off (the lazy loader's "
                     "--prefetch N is another flag)")
      ->check(fsdp_check([](const std::string& t) { fsdp::parse_on_off(t, "--fsdp-prefetch"); }))
      ->capture_default_str();
}

}  // namespace trainmem::cli
