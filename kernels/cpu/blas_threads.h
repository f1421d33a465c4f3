// How many threads the GEMM library may use for one matrix product (the CPU matmul,
// kernels/cpu/matmul.cpp). With oneMKL's sequential layer (kernels/cpu/blas_library.h) that is
// always 1: max_threads below is 1, and matmul.cpp splits every product over trainmem's pool.
// What follows is about OpenBLAS, which threads products itself.
//
// OpenBLAS splits a product over its threads and, after each threaded call, keeps its worker
// threads spinning (sched_yield in a loop) for a while in case another call follows. A training
// step makes many products too small to gain from a second thread, and between them it runs other
// kernels: the spinning workers then take the core those kernels (or another process on a shared
// machine) could use. So each product gets one thread unless it is large:
//
//   threads(m, n, k) = max_threads   if m * n * k >= min_mnk
//                      1             otherwise
//
// max_threads is OpenBLAS's own count when first asked (its default is the cores; the
// OPENBLAS_NUM_THREADS environment variable sets it, 1 turns threading off). min_mnk is
// kBlasMinMnkForThreads (blas_threads.cpp, with where it comes from) unless the environment
// variable TRAINMEM_BLAS_MIN_MNK says otherwise (0: every product threaded, as plain OpenBLAS).
//
// The thread count can change the last bits of a product (measured: the small model's first loss
// differs in the 8th digit between 1 and 2 threads with OpenBLAS 0.3.21), so it is a function of
// the product's shape and of the settings above only: the same product gets the same count, and
// the same bits, in every run on the machine (a recomputed layer equals the first pass). Below
// the threshold the bits no longer depend on the machine's core count at all.
#pragma once
#include <cstddef>

namespace trainmem::kernels::cpu {

struct BlasThreadPolicy {
  int max_threads = 1;
  double min_mnk = 0;  // products with m * n * k below this run on one thread
};

// The policy in force (read from OpenBLAS and the environment on first use).
BlasThreadPolicy blas_thread_policy();
// Replaces it (the benchmark compares policies with this).
void set_blas_thread_policy(const BlasThreadPolicy& policy);
// The thread count the policy gives one m x n x k product.
int blas_threads_for(std::size_t m, std::size_t n, std::size_t k);
// Tells OpenBLAS that count before the product is made (only when it changes).
void use_blas_threads_for(std::size_t m, std::size_t n, std::size_t k);
// Tells OpenBLAS to use one thread, whatever the policy: for the products a kernel makes inside
// parallel_for (attention's, one (batch, head) per call), whose threads already use the cores. Their
// bits then depend on nothing but their shapes. Call it before parallel_for, not inside.
void use_one_blas_thread();

}  // namespace trainmem::kernels::cpu
