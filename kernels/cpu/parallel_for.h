// Splits a CPU kernel's independent iterations over the machine's cores.
//
//   parallel_for(n, min_per_thread, [&](std::size_t begin, std::size_t end) { ... });
//
// runs body on contiguous ranges [begin, end) that cover [0, n) once, one range per thread, the
// first on the calling thread, and returns when every range is done. It is for loops whose
// iterations write disjoint outputs and read nothing another iteration writes (elementwise ops,
// the rows of a row-wise op, the heads of attention): each output is then computed by the same
// instructions in the same order as by the serial loop, so the results are the same bits. Sums
// across iterations (a layernorm's dweight over rows, a norm) stay serial: splitting them would
// change their order.
//
// Threads: TRAINMEM_CPU_THREADS if set (1: everything serial), else the cores the machine has. A
// range gets at least min_per_thread iterations, so small loops stay on one thread (starting a
// thread costs tens of microseconds). Threads are started per call and end with it: nothing spins
// between kernels (OpenBLAS's workers do, kernels/cpu/blas_threads.h). body must not throw.
#pragma once
#include <cstddef>
#include <functional>

namespace trainmem::kernels::cpu {

// The number of threads parallel_for may use.
int cpu_threads();

void parallel_for(std::size_t n, std::size_t min_per_thread, const std::function<void(std::size_t, std::size_t)>& body);

}  // namespace trainmem::kernels::cpu
