// The GEMM thread policy of blas_threads.h (OpenBLAS's threads; oneMKL's sequential layer has one).
#include "kernels/cpu/blas_threads.h"

#include "kernels/cpu/blas_library.h"

#include <cstdlib>
#include <mutex>
#include <string>

namespace trainmem::kernels::cpu {

namespace {
// Between the two models' products, measured with kernels/bench/bench_blas_threads.cpp on the
// shared 2-core machine (load about 3.7): a second thread made the small model's products
// (m*n*k <= 34M, about 1 ms each) 3-8% slower, and the 124M model's (>= 604M) from 2% slower to 7%
// faster; whole 124M steps were no faster at that load, so those stay threaded for a machine with
// a free core. Figures in kernels/cpu/speed.md.
constexpr double kBlasMinMnkForThreads = 256.0 * 1024 * 1024;

std::mutex g_mutex;
bool g_known = false;
BlasThreadPolicy g_policy;
int g_current = -1;  // the count last given to OpenBLAS (-1: none yet)

// Under g_mutex.
const BlasThreadPolicy& policy_locked() {
  if (!g_known) {
    g_policy.max_threads = blas_library_max_threads();
    g_policy.min_mnk = kBlasMinMnkForThreads;
    if (const char* env = std::getenv("TRAINMEM_BLAS_MIN_MNK")) g_policy.min_mnk = std::stod(env);
    g_known = true;
  }
  return g_policy;
}
}  // namespace

BlasThreadPolicy blas_thread_policy() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return policy_locked();
}

void set_blas_thread_policy(const BlasThreadPolicy& policy) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_policy = policy;
  g_known = true;
}

int blas_threads_for(std::size_t m, std::size_t n, std::size_t k) {
  std::lock_guard<std::mutex> lock(g_mutex);
  const BlasThreadPolicy& p = policy_locked();
  const double mnk = static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
  return mnk >= p.min_mnk ? p.max_threads : 1;
}

namespace {
void use_blas_threads(int threads) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (threads == g_current) return;
  blas_library_set_threads(threads);
  g_current = threads;
}
}  // namespace

void use_blas_threads_for(std::size_t m, std::size_t n, std::size_t k) { use_blas_threads(blas_threads_for(m, n, k)); }

void use_one_blas_thread() { use_blas_threads(1); }

}  // namespace trainmem::kernels::cpu
