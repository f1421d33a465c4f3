// Rotary position embeddings (RoPE), "rotate half" convention (as Hugging Face's Llama computes
// it): a head vector v of D elements (D even) at position t has its element i paired with element
// i + D/2, and each pair turned by its own angle:
//   freq_i  = theta^(-2i/D)                      for i in [0, D/2)   (or Llama 3.1's rescaling
//                                                                      of it: rope_frequencies.h)
//   angle   = t * freq_i
//   out_i       = v_i cos(angle) - v_{i+D/2} sin(angle)
//   out_{i+D/2} = v_i sin(angle) + v_{i+D/2} cos(angle)
// theta is the base (Llama 2: 10000, Llama 3: 500000). Backward is the inverse rotation (angle ->
// -angle) of the incoming gradient, which is the transpose of the forward's (the forward is
// linear in v, its Jacobian a rotation): dinp is WRITTEN, not accumulated.
//
// Layout. The model's fused qkv projection output is [B, Tn, (H + 2*Hkv) * D]: q heads, then k
// heads, then v heads (grouped-query attention). A call rotates `heads` consecutive heads of D
// elements starting at column `first_column` of each of the B*Tn rows, the rows `row_stride`
// elements apart; the position t of row r is r % Tn (its index within its sequence). The model
// calls it once for q (first_column 0, heads H) and once for k (first_column H*D, heads Hkv).
// Columns outside [first_column, first_column + heads*D) are neither read nor written, in `out`
// as in `inp`. In place or out of place: out may equal inp (never partly overlap it).
// No saved tensors, no workspace (RoPE has no parameters; backward needs only the positions).
//
// Precision. freq_i, the angle t * freq_i and its cos and sin are computed in double on BOTH
// backends; cos and sin are then rounded once to the compute type (fp32; double for double), and
// the rotation itself is done in the compute type, each output rounded once to the storage type T.
// Why double: the angle grows with t. In fp32, at t near 131072 = 2^17 (a 128k context) the
// angles of the high frequencies (freq_i near 1) are near 2^17, where fp32's ulp is 2^-7: rounding
// the product costs up to 2^-8 rad, and freq_i's own fp32 rounding (2^-24 relative) times t up to
// 2^-7 more -- cos/sin off by up to ~1e-2 (7.7e-3 measured for D = 128 over t < 131072, in
// test_rope_cpu), worse than bf16's rounding of the output. In double the angle is within
// t (ln(theta) + 3) 2^-53 of the exact one (~2.5e-10 at t = 131072, theta = 500000), far below
// fp32's rounding of cos/sin (2^-24), so every position is rotated as accurately as position 0. (Hugging Face
// computes the angle in fp32; at long contexts this kernel is the more accurate of the two.)
// CUDA: each thread owns one (row, pair i), computes freq_i, the angle and sincos in double once
// and applies them to the `heads` heads of its row, so the fp64 work is one pow and one sincos per
// `heads` pairs (sm_80 and sm_90 run fp64 at half the fp32 rate; not timed yet).
//
// Storage type T (kernels/dtype.h) for inp, out, dout and dinp: float, bf16 or fp16 (and double
// on the CPU). In 16 bits the CPU result is bit for bit the fp32 kernel's on the widened inputs,
// rounded. The CUDA result differs from the CPU's by the last bits: its double pow/sincos may
// round cos/sin to the neighbouring fp32 value, and nvcc fuses a multiply and an add (FMA).
#pragma once
#include <cstddef>
#include <stdexcept>
#include <string>

#include "kernels/dtype.h"
#include "kernels/rope_frequencies.h"
#include "kernels/kernel_cost.h"
#include "kernels/kernel_stream.h"

namespace trainmem::kernels {

// The shapes both backends accept: D even, and the rotated heads inside a row.
inline void rope_check_arguments(const char* op, std::size_t heads, std::size_t D, std::size_t row_stride,
                                 std::size_t first_column, const RopeFrequencies& frequencies) {
  if (D % 2 != 0)
    throw std::invalid_argument(std::string(op) + ": the head size D must be even, got " + std::to_string(D));
  if (first_column + heads * D > row_stride)
    throw std::invalid_argument(std::string(op) + ": columns [" + std::to_string(first_column) + ", " +
                                std::to_string(first_column + heads * D) + ") do not fit a row of " +
                                std::to_string(row_stride));
  frequencies.check(op);
}

namespace cpu {
template <typename T>
void rope_forward(T* out, const T* inp, std::size_t B, std::size_t Tn, std::size_t heads, std::size_t D,
                  std::size_t row_stride, std::size_t first_column, RopeFrequencies frequencies);
// dinp = R(-angle) dout   (written, not accumulated; dinp may be dout: in place)
template <typename T>
void rope_backward(T* dinp, const T* dout, std::size_t B, std::size_t Tn, std::size_t heads, std::size_t D,
                   std::size_t row_stride, std::size_t first_column, RopeFrequencies frequencies);
}  // namespace cpu
namespace cuda {
template <typename T = float>
void rope_forward(void* stream, Out<T> out, In<T> inp, std::size_t B, std::size_t Tn, std::size_t heads,
                  std::size_t D, std::size_t row_stride, std::size_t first_column, RopeFrequencies frequencies);
template <typename T = float>
void rope_backward(void* stream, Out<T> dinp, In<T> dout, std::size_t B, std::size_t Tn, std::size_t heads,
                   std::size_t D, std::size_t row_stride, std::size_t first_column, RopeFrequencies frequencies);
}  // namespace cuda

template <typename T = float>
inline void rope_forward(const Stream& s, Out<T> out, In<T> inp, std::size_t B, std::size_t Tn, std::size_t heads,
                         std::size_t D, std::size_t row_stride, std::size_t first_column, RopeFrequencies frequencies) {
  KernelCost cost(s, memory_call<T>("rope_forward", double(B) * Tn * heads * D, 1, 1, 6));
  if (s.backend == Backend::meta) return;
  if (s.backend == Backend::cpu)
    return cpu::rope_forward<T>(out, inp, B, Tn, heads, D, row_stride, first_column, frequencies);
  TRAINMEM_CUDA_KERNEL("rope_forward", cuda::rope_forward<T>(s.cuda_stream, out, inp, B, Tn, heads, D, row_stride,
                                                             first_column, frequencies));
}
template <typename T = float>
inline void rope_backward(const Stream& s, Out<T> dinp, In<T> dout, std::size_t B, std::size_t Tn, std::size_t heads,
                          std::size_t D, std::size_t row_stride, std::size_t first_column, RopeFrequencies frequencies) {
  KernelCost cost(s, memory_call<T>("rope_backward", double(B) * Tn * heads * D, 1, 1, 6));
  if (s.backend == Backend::meta) return;
  if (s.backend == Backend::cpu)
    return cpu::rope_backward<T>(dinp, dout, B, Tn, heads, D, row_stride, first_column, frequencies);
  TRAINMEM_CUDA_KERNEL("rope_backward", cuda::rope_backward<T>(s.cuda_stream, dinp, dout, B, Tn, heads, D, row_stride,
                                                               first_column, frequencies));
}
}  // namespace trainmem::kernels
