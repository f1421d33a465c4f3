// The linear layer of kernels/matmul.h with 16-bit (bf16 or fp16) inputs, weights and outputs and
// fp32 accumulation: the tensor-core path of mixed precision on a GPU (cuBLASLt). Same formulas:
//   out[N, OC]      = inp[N, C] @ weight[OC, C]^T + bias[OC]        (bias may be null)
//   dinp[N, C]      = dout[N, OC] @ weight[OC, C]                    (written; skipped when null)
//   dweight[OC, C] += dout^T @ inp                                   (accumulated in fp32, rounded once)
//   dbias[OC]      += sum over rows of dout                          (accumulated; skipped when null)
// Every output is rounded to 16 bits once, round-to-nearest-even, after fp32 accumulation.
// Sizes: N, C and OC need not be multiples of 8 (such shapes, and pointers not 16-byte aligned, get
// slower cuBLASLt kernels), but each must be at least 2 unless N or OC is 0 (nothing to do): cuBLASLt
// rejects a matrix with a single row or column, so those shapes throw std::invalid_argument.
//
// The dispatcher kernels::matmul_forward<bf16> / <fp16> (kernels/matmul.h) calls these on the cuda
// backend; its CPU version (cpu::matmul_forward<bf16>, fp32 staging tiles on OpenBLAS) computes the
// same thing up to the order of the fp32 sums, and is what the tests compare these with.
#pragma once
#include <cstddef>
#include <cstdint>

#include "kernels/dtype.h"
#include "kernels/kernel_stream.h"

namespace trainmem::kernels::cuda {
void matmul16_forward(void* stream, Half16 dtype, std::uint16_t* out, const std::uint16_t* inp,
                      const std::uint16_t* weight, const std::uint16_t* bias, std::size_t N, std::size_t C,
                      std::size_t OC);
void matmul16_backward(void* stream, Half16 dtype, std::uint16_t* dinp, std::uint16_t* dweight, std::uint16_t* dbias,
                       const std::uint16_t* dout, const std::uint16_t* inp, const std::uint16_t* weight, std::size_t N,
                       std::size_t C, std::size_t OC);
}  // namespace trainmem::kernels::cuda
