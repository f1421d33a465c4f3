#include "common/train/technique.h"

#include <stdexcept>

namespace trainmem {

void Techniques::add_flags(CLI::App& command, TrainingSetup& setup) const {
  for (const Technique* t : list_) t->add_flags(command, setup);
}

void Techniques::complete(TrainingSetup& setup) const {
  for (const Technique* t : list_) t->complete(setup, *this);
}

void Techniques::validate(const TrainingSetup& setup) const {
  setup.validate();
  const Technique* sharding_technique = nullptr;
  for (const Technique* t : list_) {
    t->validate(setup, *this);
    if (!t->shards(setup)) continue;
    if (sharding_technique)  // one way of spreading the model states over the ranks at a time
      throw std::invalid_argument(sharding_technique->describe(setup) + " and " + t->describe(setup) +
                                  " both shard the model states over the ranks: give one of them");
    sharding_technique = t;
  }
}

const Technique* Techniques::sharding(const TrainingSetup& setup) const {
  for (const Technique* t : list_)
    if (t->shards(setup)) return t;
  return nullptr;
}

bool Techniques::gathers_one_layer_at_a_time(const TrainingSetup& setup) const {
  for (const Technique* t : list_)
    if (t->gathers_one_layer_at_a_time(setup)) return true;
  return false;
}

std::string Techniques::describe(const TrainingSetup& setup) const {
  std::string words;
  for (const Technique* t : list_) {
    const std::string w = t->describe(setup);
    if (w.empty()) continue;
    if (!words.empty()) words += ' ';
    words += w;
  }
  return words;
}

FormulaBytes Techniques::formulas(const TrainingSetup& setup) const {
  FormulaBytes f;
  for (const Technique* t : list_) t->add_formulas(setup, f);
  for (const Technique* t : list_) t->complete_formulas(setup, f);
  return f;
}

DatasetHome Techniques::dataset_home(const TrainingSetup& setup) const {
  for (const Technique* t : list_)
    if (const std::optional<DatasetHome> home = t->dataset_home(setup)) return *home;
  return DatasetHome::host_memory;
}

int Techniques::sharding_stage(const TrainingSetup& setup) const {
  const Technique* t = sharding(setup);
  return t ? t->sharding_stage(setup) : 0;
}

std::vector<std::string> Techniques::host_dataset_remedies() const {
  std::vector<std::string> words;
  for (const Technique* t : list_)
    if (std::string w = t->host_dataset_remedy(); !w.empty()) words.push_back(std::move(w));
  return words;
}

std::vector<std::string> Techniques::category_remedies(const TrainingSetup& setup, MemoryCategory category) const {
  std::vector<std::string> words;
  for (const Technique* t : list_)
    for (CategoryRemedy& r : t->category_remedies(setup, *this))
      if (r.category == category) words.push_back(std::move(r.words));
  return words;
}

}  // namespace trainmem
