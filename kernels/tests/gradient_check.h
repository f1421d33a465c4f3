// The kernels' CPU tests' gradient check: an analytic gradient against central differences of
// the loss, in double.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <functional>
#include <vector>

namespace trainmem::kernels::gradient_check {

// Each element of x moved by +-h = 1e-6 and loss() evaluated (x restored after): the difference
// quotient (loss(x + h) - loss(x - h)) / 2h is off by h^2/6 |loss'''| plus the loss's rounding, a
// few 2^-53 |loss| / h; each test bounds worst / largest accordingly.
struct DerivativeCheck {
  double worst = 0;    // max |finite difference - analytic|
  double largest = 0;  // max |analytic|
};
inline DerivativeCheck central_differences(std::vector<double>& x, const std::vector<double>& analytic,
                                           const std::function<double()>& loss) {
  const double h = 1e-6;
  DerivativeCheck c;
  for (double g : analytic) c.largest = std::max(c.largest, std::fabs(g));
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double saved = x[i];
    x[i] = saved + h;
    const double up = loss();
    x[i] = saved - h;
    const double down = loss();
    x[i] = saved;
    c.worst = std::max(c.worst, std::fabs((up - down) / (2 * h) - analytic[i]));
  }
  return c;
}

}  // namespace trainmem::kernels::gradient_check
