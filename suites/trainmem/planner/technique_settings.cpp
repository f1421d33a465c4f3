#include "suites/trainmem/planner/technique_settings.h"

#include <exception>

#include "common/train/technique.h"
#include "suites/trainmem/techniques.h"
#include "suites/trainmem/train_flags.h"

namespace trainmem::planner {

std::string workload_flags(const Shape& shape, const std::string& setting) {
  std::string flags = shape.model_flags;
  if (setting.find("--batch ") == std::string::npos) flags += " --batch " + std::to_string(shape.batch);
  return setting.empty() ? flags : flags + " " + setting;
}

std::vector<TechniqueSetting> technique_settings(const Shape& shape, std::size_t ranks) {
  const TrainingSetup base = cli::setup_from_train_flags(workload_flags(shape, ""), DeviceKind::cpu, ranks);
  std::vector<TechniqueSetting> settings;
  for (const Technique* t : registered_techniques()) {
    const Technique::PlanChoices choices = t->plan_choices(base);
    for (const std::string& flags : choices.flags) {
      if (flags.empty()) continue;
      TrainingSetup with;
      try {
        with = cli::setup_from_train_flags(workload_flags(shape, flags), DeviceKind::cpu, ranks);
      } catch (const std::exception&) {
        continue;  // refused on this shape or rank count
      }
      if (t->describe(with) == t->describe(base)) continue;  // the technique as the shape has it
      settings.push_back({t, flags, !choices.trades_time_for_memory, registered_techniques().sharding_stage(with)});
    }
  }
  return settings;
}

}  // namespace trainmem::planner
