// A calibration of this machine that nothing measured, for the tests of `plan --device cpu`'s cache
// (planner/calibration.h): complete (every curve calibration_problem asks for, each one call of a
// millisecond per 10^6 units), so a plan reads it instead of measuring the machine (seconds).
#pragma once
#include <cstdlib>
#include <string>

#include "suites/trainmem/planner/calibration.h"

namespace trainmem::planner::fixtures {

inline Calibration synthetic_calibration(int ranks) {
  Calibration c = expected_curves(ranks);  // the curves, with no time in them
  const TimeCurve a_millisecond{{{1e6, 1e-3}}, 1};
  for (auto* curves : {&c.kernels, &c.classes, &c.collectives})
    for (auto& [_, curve] : *curves) curve = a_millisecond;
  if (!c.copy.knots.empty()) c.copy = a_millisecond;
  return c;
}

// Where `trainmem plan` run with TRAINMEM_CACHE_DIR=`dir` looks for the calibration for `ranks`.
inline std::string cache_path_in(const std::string& dir, int ranks) {
  const char* before = std::getenv("TRAINMEM_CACHE_DIR");
  const std::string restore = before ? before : "";
  setenv("TRAINMEM_CACHE_DIR", dir.c_str(), 1);
  const std::string path = calibration_cache_path(ranks);
  if (before) setenv("TRAINMEM_CACHE_DIR", restore.c_str(), 1);
  else unsetenv("TRAINMEM_CACHE_DIR");
  return path;
}

}  // namespace trainmem::planner::fixtures
