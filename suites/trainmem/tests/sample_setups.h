// The configurations the driver's tests run: the core's own, then every registered technique's
// samples (Technique::sample_setups, common/train/technique.h), read by train's own parser. The
// meta-device, estimator and composition tests loop over them, so a new technique is tested there
// by its registration alone.
#pragma once
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstddef>
#include <string>
#include <vector>

#include "common/train/training_setup.h"
#include "suites/trainmem/techniques.h"
#include "suites/trainmem/train_flags.h"

namespace trainmem::testing_support {

struct Sample {
  std::string technique;  // the registration's name; "core" for the core's own setups
  std::string flags;      // as after `trainmem train`
};

// The core's setups (the default run, the small model, a vocabulary padded to a multiple of 64,
// the Llama family's two small models: grouped-query attention, SwiGLU, an untied head), then each registered technique's samples, in the registrations' order.
inline std::vector<Sample> every_sample() {
  std::vector<Sample> samples = {{"core", ""}, {"core", "--model small"}, {"core", "--model small --batch 2"}, {"core", "--vocab 251"},
                                 {"core", "--model llama-tiny"}, {"core", "--model llama-small --batch 2"}};
  for (const Technique* technique : registered_techniques())
    for (const SampleSetup& sample : technique->sample_setups()) samples.push_back({technique->name(), sample.flags});
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

// The long names of the flags `technique` declares: "--recompute".
inline std::vector<std::string> flags_of(const Technique& technique) {
  CLI::App command;
  TrainingSetup setup;
  technique.add_flags(command, setup);
  std::vector<std::string> names;
  for (const CLI::Option* option : command.get_options())
    for (const std::string& name : option->get_lnames())
      if (name != "help") names.push_back("--" + name);
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace trainmem::testing_support
