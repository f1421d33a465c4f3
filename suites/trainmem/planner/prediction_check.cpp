#include "suites/trainmem/planner/prediction_check.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <stdexcept>

#include "suites/trainmem/planner/cpu_timing.h"
#include "suites/trainmem/planner/step_time.h"
#include "suites/trainmem/train_flags.h"

namespace trainmem::planner {

const std::vector<std::string>& checked_configurations(int ranks) {
  static const std::vector<std::string> one_rank = {
      "--model tiny --batch 8",
      "--model tiny --batch 8 --recompute full",
      "--model tiny --batch 4 --accum 2 --precision bf16",
      "--model small --batch 4",
      "--model small --batch 4 --recompute selective",
      "--model small --batch 4 --precision bf16 --attention flash",
      "--model small --batch 2 --accum 4 --recompute sqrt",
      "--model small --batch 4 --precision fp16 --recompute every:2",
      "--model gpt2-124m --layers 2 --seq 128 --vocab 8192 --batch 2",
      "--model gpt2-124m --layers 2 --seq 128 --vocab 8192 --batch 2 --precision bf16 --recompute full",
      "--model llama-tiny --batch 8 --recompute every:2",
      "--model small --batch 4 --zero 2 --offload optimizer",
  };
  static const std::vector<std::string> sharded = {
      "--model tiny --batch 8 --zero 0",
      "--model small --batch 2 --zero 1",
      "--model small --batch 2 --zero 2 --precision bf16",
      "--model small --batch 2 --zero 3",
      "--model small --batch 2 --fsdp full",
      "--model small --batch 2 --fsdp grad_op --precision bf16",
      "--model tiny --batch 4 --accum 2 --zero 3 --recompute full",
      "--model llama-tiny --batch 4 --fsdp full --recompute selective",
      "--model gpt2-124m --layers 2 --seq 128 --vocab 8192 --batch 2 --zero 2",
      "--model small --batch 2 --zero 2 --offload optimizer",
  };
  return ranks <= 1 ? one_rank : sharded;
}

CheckedStep check_step(const std::string& flags, const DeviceModel& device, Communicator* world, int steps) {
  if (steps < 2) throw std::invalid_argument("check_step: at least 2 steps (the first is not timed)");
  const std::size_t ranks = world ? static_cast<std::size_t>(world->world_size()) : 1;
  const TrainingSetup setup = cli::setup_from_train_flags(flags, DeviceKind::cpu, ranks);
  std::vector<double> seconds = run_timed_on_cpu(setup, world, steps, nullptr);
  seconds.erase(seconds.begin());
  CheckedStep c;
  c.flags = flags;
  c.measured_s = median(seconds);
  c.predicted_s = predict(setup, device, 0).time.seconds;  // rank 0's meta run: every rank does the same work
  return c;
}

std::vector<CheckedStep> check_configurations(const DeviceModel& device, Communicator* world, int steps) {
  std::vector<CheckedStep> checked;
  for (const std::string& flags : checked_configurations(world ? world->world_size() : 1)) {
    checked.push_back(check_step(flags, device, world, steps));
    const CheckedStep& c = checked.back();
    if (world == nullptr || world->rank() == 0)
      std::printf("%-70s predicted %8.2f ms  measured %8.2f ms  error %+6.1f%%\n", flags.c_str(), c.predicted_s * 1e3,
                  c.measured_s * 1e3, 100.0 * c.error());
  }
  return checked;
}

double spearman(const std::vector<double>& a, const std::vector<double>& b) {
  auto ranks = [](const std::vector<double>& v) {
    std::vector<std::size_t> order(v.size());
    std::iota(order.begin(), order.end(), std::size_t{0});
    std::stable_sort(order.begin(), order.end(), [&](std::size_t x, std::size_t y) { return v[x] < v[y]; });
    std::vector<double> r(v.size());
    for (std::size_t i = 0; i < v.size(); ++i) r[order[i]] = static_cast<double>(i);
    return r;
  };
  if (a.size() != b.size() || a.size() < 2) return 0;
  const std::vector<double> ra = ranks(a), rb = ranks(b);
  double d2 = 0;
  for (std::size_t i = 0; i < a.size(); ++i) d2 += (ra[i] - rb[i]) * (ra[i] - rb[i]);
  const double n = static_cast<double>(a.size());
  return 1.0 - 6.0 * d2 / (n * (n * n - 1.0));
}

Agreement agreement(const std::vector<CheckedStep>& steps) {
  std::vector<double> predicted, measured, errors;
  for (const CheckedStep& s : steps) {
    predicted.push_back(s.predicted_s);
    measured.push_back(s.measured_s);
    errors.push_back(std::abs(s.error()));
  }
  return {median(errors), spearman(predicted, measured), steps.size()};
}

Agreement agreement_on_this_machine(Communicator* world, const AgreementBound& bound) {
  const bool rank0 = world == nullptr || world->rank() == 0;
  Agreement a;
  for (int round = 1; round <= 2; ++round) {
    const auto model = cpu_model(calibrate_this_machine(world));
    a = agreement(check_configurations(*model, world, 5));
    if (rank0)
      std::printf("round %d: median |error| %.1f%%, Spearman %.3f over %zu configurations on %d rank(s)\n", round,
                  100 * a.median_abs_error, a.spearman, a.configurations, world ? world->world_size() : 1);
    const double missed = rank0 && !bound.met_by(a) ? 1.0 : 0.0;
    if ((world ? world->all_reduce_max(missed) : missed) == 0.0) break;
  }
  return a;
}

}  // namespace trainmem::planner
