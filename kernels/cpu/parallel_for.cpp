// parallel_for (kernels/cpu/parallel_for.h): contiguous ranges, one std::thread per range but the first.
#include "kernels/cpu/parallel_for.h"

#include <algorithm>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

namespace trainmem::kernels::cpu {

int cpu_threads() {
  static const int threads = [] {
    if (const char* env = std::getenv("TRAINMEM_CPU_THREADS")) return std::max(1, std::stoi(env));
    return std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  }();
  return threads;
}

void parallel_for(std::size_t n, std::size_t min_per_thread,
                  const std::function<void(std::size_t, std::size_t)>& body) {
  const std::size_t by_size = n / std::max<std::size_t>(1, min_per_thread);
  const std::size_t parts = std::min(static_cast<std::size_t>(cpu_threads()), std::max<std::size_t>(1, by_size));
  if (parts <= 1) {
    if (n > 0) body(0, n);
    return;
  }
  // Range p is [n * p / parts, n * (p + 1) / parts): their sizes differ by at most one.
  std::vector<std::thread> workers;
  workers.reserve(parts - 1);
  for (std::size_t p = 1; p < parts; ++p) workers.emplace_back(body, n * p / parts, n * (p + 1) / parts);
  body(0, n / parts);
  for (std::thread& w : workers) w.join();
}

}  // namespace trainmem::kernels::cpu
