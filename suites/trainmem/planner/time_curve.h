// How long a call of a given size takes on this machine, read off measured calls: the calibration's
// curve for one kernel (or copy, or collective), calibration.h.
//
// The calls are grouped in size classes, a factor of 4 in units each (units: flops for GEMMs and
// attention, bytes for the rest); each class becomes one knot, its calls' median units and median
// seconds (a call slowed by an interruption moves no knot). Between knots the time is the straight
// line joining them; beyond the widest knot it grows in proportion to the units (wide calls run at
// the widest class's rate: throughput-bound); below the narrowest it follows the first segment
// down, but never below that knot's rate nor above its time (short calls are overhead-bound):
//
//   seconds(u) = s_i + (s_{i+1} - s_i) (u - u_i) / (u_{i+1} - u_i)    u_i <= u <= u_{i+1}
//              = s_n u / u_n                                           u > u_n
//              = clamp(first segment at u, s_1 u / u_1, s_1)           u < u_1
//
// Why not one line, seconds = overhead + units x rate, by least squares: a CPU's rate changes over
// three decades of sizes (OpenBLAS threads only wide products), so a line fits either end: fitted
// plainly, the largest calls, missing tiny's many short ones (its sharded steps +30-80%); fitted to
// relative errors, the many short calls, overestimating GPT-2 124M's few wide bf16 products by
// 40-55%. The curve goes through each class's own calls.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

namespace trainmem::planner {

// One observation: a call's units and seconds under a key ("matmul_forward/bf16").
struct TimedCall {
  std::string key;
  double units;
  double seconds;
};

struct TimeCurve {
  struct Knot {
    double units = 0;
    double seconds = 0;
  };
  std::vector<Knot> knots;  // by ascending units
  std::size_t calls = 0;    // how many calls it was read from
  double seconds(double units) const;
};

// The curve through `calls` (all of one key). No calls: a curve that gives 0.
TimeCurve fit_curve(const std::vector<TimedCall>& calls);

// The middle value (the mean of the two middle ones for an even count; 0 for none).
double median(std::vector<double> values);

}  // namespace trainmem::planner
