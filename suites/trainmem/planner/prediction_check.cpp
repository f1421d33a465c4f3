#include "suites/trainmem/planner/prediction_check.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <stdexcept>

#include "suites/trainmem/planner/cpu_timing.h"
#include "suites/trainmem/planner/step_time.h"
#include "suites/trainmem/planner/technique_settings.h"
#include "suites/trainmem/train_flags.h"

namespace trainmem::planner {

// The shapes checked: none of them a calibration's (calibration.cpp), so the check times shapes the
// curves were not read off.
const std::vector<Shape>& checked_shapes() {
  static const std::vector<Shape> list = {
      {"--model tiny", 6},
      {"--model small", 6},
      {"--model gpt2-124m --layers 2 --seq 128 --vocab 8192", 2},
      {"--model llama-tiny", 6},
  };
  return list;
}

std::vector<std::string> checked_configurations(int ranks) {
  std::vector<std::string> list;
  for (const Shape& shape : checked_shapes()) list.push_back(workload_flags(shape, ""));
  std::size_t next = 0;
  for (const TechniqueSetting& setting : technique_settings(checked_shapes().front(), static_cast<std::size_t>(std::max(ranks, 1))))
    if (ranks <= 1 || setting.sharding_stage > 0) list.push_back(workload_flags(checked_shapes()[next++ % checked_shapes().size()], setting.flags));
  return list;
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

MachineNoise machine_noise(const std::vector<CheckedStep>& round1, const std::vector<CheckedStep>& round2) {
  std::vector<double> spreads, measured1, measured2;
  for (std::size_t i = 0; i < std::min(round1.size(), round2.size()); ++i) {
    spreads.push_back(std::abs(round1[i].error() - round2[i].error()));
    measured1.push_back(round1[i].measured_s);
    measured2.push_back(round2[i].measured_s);
  }
  return {median(spreads), spearman(measured1, measured2)};
}

std::optional<std::string> too_noisy_to_judge(const MachineNoise& noise, const AgreementBound& bound,
                                              const AgreementBound& target) {
  const double error_margin = bound.median_abs_error - target.median_abs_error;
  const double rank_margin = target.spearman - bound.spearman;
  char text[512];
  if (noise.error_spread > error_margin) {
    std::snprintf(text, sizeof text,
                  "this machine's own noise: the same configurations' errors differ by a median %.1f points between "
                  "two rounds, more than the %.0f points the bound (%.0f%%) leaves above the target (%.0f%%); "
                  "bench_planner records the figures",
                  100 * noise.error_spread, 100 * error_margin, 100 * bound.median_abs_error, 100 * target.median_abs_error);
    return std::string(text);
  }
  if (1 - noise.rank_agreement > rank_margin) {
    std::snprintf(text, sizeof text,
                  "this machine's own noise: it ranks the same steps with a Spearman of %.3f between two rounds, "
                  "further from 1 than the %.1f the bound (%.2f) leaves below the target (%.2f); bench_planner "
                  "records the figures",
                  noise.rank_agreement, rank_margin, bound.spearman, target.spearman);
    return std::string(text);
  }
  return std::nullopt;
}

RoundsOnThisMachine agreement_on_this_machine(Communicator* world, const AgreementBound& bound) {
  const bool rank0 = world == nullptr || world->rank() == 0;
  RoundsOnThisMachine r;
  std::vector<CheckedStep> first_round;
  for (int round = 1; round <= 2; ++round) {
    r.calibration = calibrate_this_machine(world);
    const auto model = cpu_model(r.calibration);
    const std::vector<CheckedStep> checked = check_configurations(*model, world, 5);
    r.agreement = agreement(checked);
    if (rank0)
      std::printf("round %d: median |error| %.1f%%, Spearman %.3f over %zu configurations on %d rank(s)\n", round,
                  100 * r.agreement.median_abs_error, r.agreement.spearman, r.agreement.configurations,
                  world ? world->world_size() : 1);
    if (round == 2) r.noise = machine_noise(first_round, checked);
    const double missed = rank0 && !bound.met_by(r.agreement) ? 1.0 : 0.0;
    r.met = (world ? world->all_reduce_max(missed) : missed) == 0.0;
    if (r.met) break;
    first_round = checked;
  }
  if (rank0 && r.noise)
    std::printf("the machine between the rounds: errors differ by a median %.1f points, measured times rank with "
                "Spearman %.3f\n",
                100 * r.noise->error_spread, r.noise->rank_agreement);
  return r;
}

}  // namespace trainmem::planner
