#include "suites/trainmem/planner/plan_search.h"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <set>
#include <sstream>
#include <stdexcept>
#include <tuple>

#include "common/util/byte_size.h"
#include "suites/trainmem/techniques.h"
#include "suites/trainmem/train_flags.h"

namespace trainmem::planner {

namespace {

struct Dimension {
  Technique::PlanChoices choices;
};

std::string joined(const std::vector<std::string>& parts) {
  std::string text;
  for (const std::string& p : parts) {
    if (p.empty()) continue;
    if (!text.empty()) text += ' ';
    text += p;
  }
  return text;
}

// Whether `a` is no later than `b` in every dimension that trades time for memory and equal in
// the others: then `a` is at least as fast as `b`.
bool no_slower(const std::vector<std::size_t>& a, const std::vector<std::size_t>& b, const std::vector<Dimension>& dims) {
  for (std::size_t d = 0; d < dims.size(); ++d) {
    if (dims[d].choices.trades_time_for_memory ? a[d] > b[d] : a[d] != b[d]) return false;
  }
  return true;
}

}  // namespace

namespace {

// Every rank's share of the global batch, as one micro-batch, with no technique chosen: the setup
// the techniques' choices are read from (and the check that train takes the run's arguments).
TrainingSetup base_setup(const PlanQuestion& q) {
  if (q.world_size < 1) throw std::invalid_argument("--world-size must be at least 1");
  if (q.global_batch < 1 || q.global_batch % q.world_size != 0)
    throw std::invalid_argument("--global-batch " + std::to_string(q.global_batch) + " must be a multiple of --world-size " +
                                std::to_string(q.world_size) + " (every rank takes the same number of sequences)");
  std::vector<std::string> args = q.run_args;
  args.insert(args.end(), {"--batch", std::to_string(q.global_batch / q.world_size)});
  return cli::setup_from_train_flags(args, q.backend, q.world_size);
}

// The run's arguments and a candidate's technique flags (words without spaces, the techniques'
// own plan_choices), as one argument list.
std::vector<std::string> candidate_args(const PlanQuestion& q, const std::string& technique_flags) {
  std::vector<std::string> args = q.run_args;
  std::istringstream words(technique_flags);
  for (std::string word; words >> word;) args.push_back(word);
  return args;
}

}  // namespace

void check_question(const PlanQuestion& q) { base_setup(q); }

Plan make_plan(const PlanQuestion& q, const DeviceModel& device) {
  const auto start = std::chrono::steady_clock::now();
  const TrainingSetup base = base_setup(q);

  std::vector<Dimension> dims;
  for (const Technique* t : registered_techniques()) {
    Technique::PlanChoices c = t->plan_choices(base);
    if (!c.flags.empty()) dims.push_back({std::move(c)});
  }
  Plan plan;
  plan.mixes = 1;
  for (const Dimension& d : dims) plan.mixes *= d.choices.flags.size();

  std::vector<std::vector<std::size_t>> fitted;  // the index vectors of the mixes that fit
  std::set<std::string> states_too_large;        // precision + sharding + gradients whose setup ran out
  std::vector<std::size_t> index(dims.size(), 0);
  for (std::size_t m = 0; m < plan.mixes; ++m) {
    std::size_t rest = m;
    for (std::size_t d = dims.size(); d-- > 0;) {
      index[d] = rest % dims[d].choices.flags.size();
      rest /= dims[d].choices.flags.size();
    }
    if (std::any_of(fitted.begin(), fitted.end(), [&](const auto& f) { return no_slower(f, index, dims); })) continue;
    std::vector<std::string> parts, states;
    for (std::size_t d = 0; d < dims.size(); ++d) {
      const std::string& flags = dims[d].choices.flags[index[d]];
      parts.push_back(flags);
      if (dims[d].choices.sizes_model_states) states.push_back(flags);
    }
    const std::string states_key = joined(states);
    if (states_too_large.count(states_key)) continue;

    Candidate c;
    c.flags = joined(parts);
    try {
      c.setup = cli::setup_from_train_flags(candidate_args(q, c.flags), q.backend, q.world_size);
    } catch (const std::exception&) {
      continue;  // a mix the techniques do not allow together
    }
    Prediction p;
    try {
      p = predict(c.setup, device, q.capacity);
    } catch (const std::invalid_argument&) {
      continue;  // rejected when the run is built (a kernel's shape rule)
    }
    ++plan.meta_runs;
    c.describe = describe_setup(c.setup);
    c.peak_allocated = p.memory.peak_allocated;
    c.peak_reserved = p.memory.peak_reserved;
    c.time = p.time;
    c.fits = !p.memory.oom.has_value();
    if (c.fits) {
      fitted.push_back(index);
      plan.fitting.push_back(std::move(c));
      continue;
    }
    // What it held when its request failed, the request included: above the capacity.
    const OomReport& oom = *p.memory.oom;
    c.peak_allocated = std::max(c.peak_allocated, oom.allocated_bytes + oom.rounded_bytes);
    c.peak_reserved = std::max(c.peak_reserved, oom.reserved_bytes + oom.device_request_bytes);
    const bool in_setup = p.memory.oom_phase == "setup";
    c.reason = "out of memory " + std::string(in_setup ? "before the first step (the model states)" : "in " + p.memory.oom_phase) +
               " at " + format_bytes(p.memory.oom->requested_bytes) + " more";
    if (in_setup) states_too_large.insert(states_key);
    plan.not_fitting.push_back(std::move(c));
  }
  std::stable_sort(plan.fitting.begin(), plan.fitting.end(),
                   [](const Candidate& a, const Candidate& b) { return a.time.seconds < b.time.seconds; });
  plan.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return plan;
}

}  // namespace trainmem::planner
