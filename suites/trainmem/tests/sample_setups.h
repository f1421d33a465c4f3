// The configurations the driver's tests run: the core's own, then every registered technique's
// samples (Technique::sample_setups, common/train/technique.h), read by train's own parser. The
// meta-device, estimator and composition tests loop over them, so a new technique is tested there
// by its registration alone.
#pragma once

#include <algorithm>
#include <cstddef>
#include <string>
#include <vector>

#include "common/train/training_setup.h"
#include "suites/trainmem/cli_common.h"
#include "suites/trainmem/techniques.h"
#include "suites/trainmem/train_flags.h"

namespace trainmem::testing_support {

struct Sample {
  std::string technique;  // the registration's name; "core" for the core's own setups
  std::string flags;      // as after `trainmem train`
};

// The core's setups (the default run, the small model, a vocabulary padded to a multiple of 64,
// the Llama family's two small models: grouped-query attention, SwiGLU, an untied head; and its two
// mixtures of experts, the small one with a shared expert and the load-balancing loss), each
// registered technique's samples in the registrations' order, then the combined samples.
//
// A technique's own samples name only its flags and the core's (a model, a batch, --precision,
// --attention), so that its words stay in its folder (ci/check_includes.py --names);
// configurations whose point is several techniques at once are the driver's, here:
//   accumulation with fp16's loss scaler and selective recompute, and in bf16 on a batch of 16
//     (the allocator's large pool);
//   flash attention with full recompute (its forward run twice), and on the small model with the
//     lazy loader;
//   gradients on demand over accumulated micro-batches and in ZeRO-2's units (both families), the
//     optimizer in backward over ZeRO-1's shards;
//   each loader with recompute on larger batches, in 16 bits (the large pool);
//   fp16 with selective recompute on the Llama family;
//   a mixture of experts in bf16 with selective recompute and accumulation, with gradients on
//     demand in ZeRO-2's units, and with flash attention, full recompute and the lazy loader.
inline const std::vector<std::string>& combined_samples() {
  static const std::vector<std::string> list = {
      "--accum 3 --precision fp16 --recompute selective",
      "--batch 16 --accum 2 --precision bf16 --recompute selective",
      "--attention flash --recompute full",
      "--model small --batch 8 --attention flash --recompute full --loader lazy",
      "--grads on-demand --accum 2",
      "--grads on-demand --zero 2",
      "--optimizer-in-backward --grad-clip 0 --zero 1",
      "--model llama-tiny --grads on-demand --zero 2",
      "--batch 16 --precision bf16 --attention flash --recompute full --loader lazy",
      "--batch 20 --precision fp16 --recompute sqrt --loader eager",
      "--model llama-tiny --precision fp16 --recompute selective",
      "--model llama-small-moe --precision bf16 --recompute selective --accum 2",
      "--model llama-tiny-moe --grads on-demand --zero 2",
      "--model llama-tiny-moe --attention flash --recompute full --loader lazy",
  };
  return list;
}

inline std::vector<Sample> every_sample() {
  std::vector<Sample> samples = {{"core", ""}, {"core", "--model small"}, {"core", "--model small --batch 2"}, {"core", "--vocab 251"},
                                 {"core", "--model llama-tiny"}, {"core", "--model llama-small --batch 2"},
                                 {"core", "--model llama-tiny-moe"},
                                 {"core", "--model llama-small-moe --batch 2 --router-aux-loss 0.01"}};
  for (const Technique* technique : registered_techniques())
    for (const SampleSetup& sample : technique->sample_setups()) samples.push_back({technique->name(), sample.flags});
  for (const std::string& flags : combined_samples()) samples.push_back({"combined", flags});
  return samples;
}

// The setup `trainmem train FLAGS` runs in one process (a world of `world_size` ranks, following
// `backend`'s allocation pattern): FLAGS read by train's parser (CLI::ParseError), then completed
// and validated by every technique (std::invalid_argument), as train does.
inline TrainingSetup setup_from_flags(const std::string& flags, DeviceKind backend = DeviceKind::cpu,
                                      std::size_t world_size = 1) {
  return cli::setup_from_train_flags(flags, backend, world_size);
}

// The flags a command line names: "--zero 3 --precision bf16" -> {"--precision", "--zero"}, sorted.
inline std::vector<std::string> flag_names(const std::string& flags) {
  std::vector<std::string> names;
  std::size_t at = 0;
  while (at < flags.size()) {
    const std::size_t end = std::min(flags.find(' ', at), flags.size());
    const std::string word = flags.substr(at, end - at);
    if (word.rfind("--", 0) == 0) names.push_back(word.substr(0, word.find('=')));
    at = end + 1;
  }
  std::sort(names.begin(), names.end());
  return names;
}

// The long names of the flags `technique` declares ("--recompute"), sorted.
inline std::vector<std::string> flags_of(const Technique& technique) {
  std::vector<std::string> names = cli::flags_of(technique);
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace trainmem::testing_support
