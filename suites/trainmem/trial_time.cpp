#include "suites/trainmem/trial_time.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "common/model/storage_type.h"
#include "kernels/matmul.h"
#include "suites/trainmem/planner/step_time.h"

namespace trainmem::cli {

namespace {

using Clock = std::chrono::steady_clock;

// The fastest of three runs of `work`, in seconds.
template <typename Work>
double fastest_of_three(Work&& work) {
  double best = 1e300;
  for (int i = 0; i < 3; ++i) {
    const auto start = Clock::now();
    work();
    best = std::min(best, std::chrono::duration<double>(Clock::now() - start).count());
  }
  return std::max(best, 1e-9);
}

// The two rates as a device model (planner/device_model.h): every kernel at its class's rate.
class ProbedCpu : public planner::DeviceModel {
 public:
  explicit ProbedCpu(CpuSpeed speed) : speed_(speed) {}
  std::string describe() const override { return "this CPU, probed"; }
  double kernel_seconds(const kernels::KernelCall& call) const override {
    return call.kind == kernels::KernelClass::memory ? call.bytes / speed_.copy_bytes_per_s
                                                     : call.flops / speed_.product_flops_per_s;
  }
  double host_seconds(const kernels::KernelCall& call) const override { return kernel_seconds(call); }
  double copy_seconds(CopyDirection, double bytes) const override { return bytes / speed_.copy_bytes_per_s; }
  // (max-batch's trials run one process: no collective happens)
  double collective_seconds(Collective, const CommCounts&, int) const override { return 0; }
  bool overlaps_collectives() const override { return false; }

 private:
  CpuSpeed speed_;
};

}  // namespace

CpuSpeed measure_cpu_speed(const TrainingSetup& setup) {
  CpuSpeed speed;
  constexpr std::size_t N = 512, C = 768, OC = 768;  // GPT-2's width, 512 rows
  with_storage_type(storage_dtype(setup.precision), [&](auto tag) {
    using T = decltype(tag);
    std::mt19937 random(1);
    std::uniform_real_distribution<float> values(-1.0f, 1.0f);
    std::vector<T> inp(N * C), weight(C * OC), out(N * OC);
    for (T& x : inp) x = kernels::store<T>(values(random));
    for (T& x : weight) x = kernels::store<T>(values(random));
    const double seconds = fastest_of_three([&] {
      kernels::matmul_forward<T>(kernels::kCpuStream, out.data(), inp.data(), weight.data(), nullptr, N, C, OC);
    });
    speed.product_flops_per_s = 2.0 * N * C * OC / seconds;
  });
  const std::size_t bytes = std::size_t{64} << 20;
  std::vector<unsigned char> from(bytes, 1), to(bytes);
  speed.copy_bytes_per_s = static_cast<double>(bytes) / fastest_of_three([&] { std::memcpy(to.data(), from.data(), bytes); });
  return speed;
}

double expected_seconds(const TrainingSetup& setup, int steps, const CpuSpeed& speed) {
  const ProbedCpu device(speed);
  return planner::predict(setup, device, 0).time.seconds * steps;
}

std::string spoken_duration(double seconds) {
  char text[32];
  if (seconds < 90) std::snprintf(text, sizeof text, "%.0f s", std::max(seconds, 1.0));
  else if (seconds < 90 * 60) std::snprintf(text, sizeof text, "%.0f min", seconds / 60);
  else std::snprintf(text, sizeof text, "%.1f h", seconds / 3600);
  return text;
}

}  // namespace trainmem::cli
