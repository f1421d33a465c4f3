// Token + position embedding: out[b, t, :] = wte[tokens[b, t], :] + wpe[t, :]
// Backward (both accumulated): dwte[tokens[b, t], :] += dout[b, t, :];  dwpe[t, :] += dout[b, t, :]
// wpe (and dwpe) may be null: a model without a position table (Llama, whose positions are rotary,
// kernels/rope.h) gets out = wte[tokens] exactly (the row copied) and no dwpe.
//
// Storage type T (kernels/dtype.h): float, bf16 or fp16 (and double on the CPU). Each dwte row
// and dwpe row is widened once, every position's dout is added to it in fp32, in position order
// (b, then t), and it is rounded once per call: in 16 bits the CPU result is bit for bit the fp32
// kernel's on the widened inputs, rounded. (The CPU backward groups the positions by token to do
// so; scratch: B*T indices and one row of C fp32 values.)
//
// Workspace: the CUDA backward sorts the positions by token (a stable radix sort, so each token's
// positions stay in order) and then sums each token's rows the CPU's way: the same bits, on every
// run, in every storage type. The caller provides the sort's scratch,
// embedding_backward_workspace_bytes(B*T) bytes (a host formula, so a meta run of the CUDA pattern
// allocates the same; common/device/device.h); the CPU backward needs none and ignores it.
#pragma once
#include <cstddef>
#include <cstdint>

#include "kernels/dtype.h"
#include "kernels/kernel_cost.h"
#include "kernels/kernel_stream.h"

namespace trainmem::kernels {

// The radix sort's tile (positions per block) and digit width: 256 positions a tile, 8-bit digits.
constexpr std::size_t kEmbeddingSortTile = 256;
constexpr std::size_t kEmbeddingSortDigits = 256;
// Two key arrays and two position arrays of 32-bit values (the sort goes back and forth between
// them), and one count per digit and tile.
inline std::size_t embedding_backward_workspace_bytes(std::size_t positions) {
  const std::size_t tiles = (positions + kEmbeddingSortTile - 1) / kEmbeddingSortTile;
  return (4 * positions + kEmbeddingSortDigits * tiles) * sizeof(std::uint32_t);
}
namespace cpu {
template <typename T>
void embedding_forward(T* out, const std::int32_t* tokens, const T* wte, const T* wpe, std::size_t B, std::size_t Tn,
                       std::size_t C);
template <typename T>
void embedding_backward(T* dwte, T* dwpe, const T* dout, const std::int32_t* tokens, std::size_t B, std::size_t Tn,
                        std::size_t C);
}  // namespace cpu
namespace cuda {
template <typename T = float>
void embedding_forward(void* stream, Out<T> out, const std::int32_t* tokens, In<T> wte, In<T> wpe, std::size_t B,
                       std::size_t Tn, std::size_t C);
// workspace: embedding_backward_workspace_bytes(B * Tn) bytes, 4-byte aligned (std::invalid_argument
// otherwise).
template <typename T = float>
void embedding_backward(void* stream, Out<T> dwte, Out<T> dwpe, In<T> dout, const std::int32_t* tokens,
                        void* workspace, std::size_t B, std::size_t Tn, std::size_t C);
}  // namespace cuda

template <typename T = float>
inline void embedding_forward(const Stream& s, Out<T> out, const std::int32_t* tokens, In<T> wte, In<T> wpe,
                              std::size_t B, std::size_t Tn, std::size_t C) {
  KernelCost cost(s, memory_call<T>("embedding_forward", double(B) * Tn * C, wpe ? 2 : 1, 1, 1));
  if (s.backend == Backend::meta) return;
  if (s.backend == Backend::cpu) return cpu::embedding_forward<T>(out, tokens, wte, wpe, B, Tn, C);
  TRAINMEM_CUDA_KERNEL("embedding_forward", cuda::embedding_forward<T>(s.cuda_stream, out, tokens, wte, wpe, B, Tn, C));
}
template <typename T = float>
inline void embedding_backward(const Stream& s, Out<T> dwte, Out<T> dwpe, In<T> dout, const std::int32_t* tokens,
                               [[maybe_unused]] void* workspace, std::size_t B, std::size_t Tn, std::size_t C) {
  KernelCost cost(s, memory_call<T>("embedding_backward", double(B) * Tn * C, dwpe ? 3 : 2, dwpe ? 2 : 1, 2));
  if (s.backend == Backend::meta) return;
  if (s.backend == Backend::cpu) return cpu::embedding_backward<T>(dwte, dwpe, dout, tokens, B, Tn, C);
  TRAINMEM_CUDA_KERNEL("embedding_backward",
                       cuda::embedding_backward<T>(s.cuda_stream, dwte, dwpe, dout, tokens, workspace, B, Tn, C));
}
}  // namespace trainmem::kernels
