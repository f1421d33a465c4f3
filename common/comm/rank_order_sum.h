// The one order in which trainmem's MPI communicator adds the ranks' buffers: element by element,
// rank 0's value plus rank 1's, plus rank 2's, ... left to right in fp32, then rounded once to
// the buffer's type (round to nearest even for bf16 and fp16; nothing to round for fp32).
//
// Why one fixed order: fp32 addition is not associative, and MPI's own MPI_SUM may group the
// additions as it likes ((x0 + x1) + (x2 + x3) or ((x0 + x1) + x2) + x3, chosen by world size,
// message size and MPI build). With this order every rank, every run and every MPI build gets the
// same bits, and a test can add the same numbers in one process and compare bit for bit
// (common/tests/data_parallel_reference.h does, for the sharding suites).
#pragma once
#include <cstddef>

#include "common/tensor/dtype.h"

namespace trainmem {

// sum[i] = (((x_0[i] + x_1[i]) + x_2[i]) + ... + x_{world-1}[i]) in fp32, where x_r is the r-th of
// `world` consecutive blocks of n elements of `dtype` in `blocks` (16-bit values widened exactly).
void add_in_rank_order(const void* blocks, std::size_t world, std::size_t n, DType dtype, float* sum);

// 16-bit <-> fp32: widening is exact; narrowing rounds to nearest even (kernels/convert.h), the
// one rounding of a 16-bit sum. For fp32 both are copies.
void widen_elements(DType dtype, const void* in, float* out, std::size_t n);
void round_elements(DType dtype, const float* in, void* out, std::size_t n);

}  // namespace trainmem
