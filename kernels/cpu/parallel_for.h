// Splits a CPU kernel's independent iterations over the machine's cores.
//
//   parallel_for(n, min_per_thread, [&](std::size_t begin, std::size_t end) { ... });
//
// runs body on contiguous ranges [begin, end) that cover [0, n) once, as many ranges as threads,
// on the calling thread and a pool of worker threads, and returns when every range is done. It is for loops whose
// iterations write disjoint outputs and read nothing another iteration writes (elementwise ops,
// the rows of a row-wise op, the heads of attention): each output is then computed by the same
// instructions in the same order as by the serial loop, so the results are the same bits. Sums
// across iterations (a layernorm's dweight over rows) stay serial: splitting them by thread would
// change their order with the thread count; a sum split into blocks that the size alone fixes
// (the gradient's sum of squares, optimizer.cpp) is the same bits on any number of threads.
//
// Threads: TRAINMEM_CPU_THREADS if set (1: everything serial), else the cores the machine has. A
// range gets at least min_per_thread iterations, so small loops stay on one thread (waking a
// worker costs microseconds, more on a loaded machine). The workers are started once and sleep
// between calls: nothing spins between kernels (OpenBLAS's workers do, kernels/cpu/blas_threads.h).
// Which thread runs a range varies from call to call (parallel_for.cpp); a call made inside body,
// or while another thread's call holds the pool, runs serially. body must not throw.
#pragma once
#include <cstddef>
#include <functional>

namespace trainmem::kernels::cpu {

// The number of threads parallel_for may use.
int cpu_threads();

void parallel_for(std::size_t n, std::size_t min_per_thread, const std::function<void(std::size_t, std::size_t)>& body);

}  // namespace trainmem::kernels::cpu
