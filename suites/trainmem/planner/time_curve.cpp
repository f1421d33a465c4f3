#include "suites/trainmem/planner/time_curve.h"

#include <algorithm>
#include <cmath>
#include <map>

namespace trainmem::planner {

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

namespace {

// The size class of a call: floor(log4(units)); calls of no size (units 0) share one below all.
long size_class(double units) { return units > 0 ? std::lround(std::floor(std::log2(units) / 2.0)) : -1000; }

}  // namespace

TimeCurve fit_curve(const std::vector<TimedCall>& calls) {
  TimeCurve curve;
  curve.calls = calls.size();
  std::map<long, std::pair<std::vector<double>, std::vector<double>>> classes;  // units, seconds
  for (const TimedCall& c : calls) {
    auto& [units, seconds] = classes[size_class(c.units)];
    units.push_back(c.units);
    seconds.push_back(c.seconds);
  }
  for (const auto& [_, observed] : classes) curve.knots.push_back({median(observed.first), median(observed.second)});
  return curve;  // std::map: the classes, and so the knots, in ascending units
}

double TimeCurve::seconds(double u) const {
  if (knots.empty()) return 0;
  const Knot& first = knots.front();
  const Knot& last = knots.back();
  if (u >= last.units) return last.units > 0 ? last.seconds * u / last.units : last.seconds;
  if (u <= first.units) {
    if (knots.size() == 1 || first.units <= 0) return first.units > 0 ? first.seconds * u / first.units : first.seconds;
    const Knot& second = knots[1];
    const double along = first.seconds + (second.seconds - first.seconds) * (u - first.units) / (second.units - first.units);
    return std::clamp(along, first.seconds * u / first.units, first.seconds);
  }
  const auto upper = std::upper_bound(knots.begin(), knots.end(), u, [](double v, const Knot& k) { return v < k.units; });
  const Knot& hi = *upper;
  const Knot& lo = *(upper - 1);
  return lo.seconds + (hi.seconds - lo.seconds) * (u - lo.units) / (hi.units - lo.units);
}

}  // namespace trainmem::planner
