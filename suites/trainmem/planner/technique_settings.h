// The techniques' settings the planner's own runs take, read from the registrations.
//
// The calibration (calibration.cpp) and the check of its predictions (prediction_check.cpp) run
// model shapes of their own -- a shape is not a technique -- with the settings every registered
// technique offers a plan (Technique::plan_choices). So a new technique's settings are timed and
// checked from its folder alone, and the planner spells none of them.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

namespace trainmem {
class Technique;
}

namespace trainmem::planner {

// A model shape with its micro-batch, as train flags: {"--model tiny", 8}.
struct Shape {
  std::string model_flags;
  std::size_t batch;
};

// The flags of one run: the shape, its micro-batch unless the setting gives one (accumulation's
// settings split the batch themselves), then the setting.
std::string workload_flags(const Shape& shape, const std::string& setting);

// One setting of one technique, as flags: "--recompute selective".
struct TechniqueSetting {
  const Technique* technique;
  std::string flags;
  // Another kernel or storage type for the same work (precision, attention: the technique's
  // choices do not trade time for memory), rather than more or less of the same calls.
  bool picks_kernels;
  int sharding_stage;  // which model states the run spreads over the ranks (Techniques::sharding_stage; 0: none)
};

// Every setting the registered techniques offer a plan of `shape` over `ranks` ranks, in the order
// of registration and of each technique's choices, but those that leave the technique as the shape
// has it (its words in the progress line unchanged, "" among them) and those train refuses.
std::vector<TechniqueSetting> technique_settings(const Shape& shape, std::size_t ranks);

}  // namespace trainmem::planner
