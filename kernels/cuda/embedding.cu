// CUDA: token + position embedding, forward and backward (formulas in embedding.h; the CPU reference
// is cpu/embedding.cpp). Tokens must lie in [0, V): they index wte's rows unchecked, as on the CPU.
#include <cstddef>
#include <cstdint>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_utils.cuh"
#include "kernels/embedding.h"

namespace trainmem::kernels::cuda {

namespace {

constexpr unsigned kBlock = 256;

// out[b,t,c] = wte[tokens[b,t], c] + wpe[t, c].
// Thread i -> element i = (b*T + t)*C + c of out (grid-stride, 64-bit): consecutive threads read
// consecutive channels of one wte row and one wpe row.
__global__ void embedding_forward_kernel(float* out, const std::int32_t* tokens, const float* wte, const float* wpe,
                                         std::size_t B, std::size_t T, std::size_t C) {
  const std::size_t total = B * T * C;
  for (std::size_t i = detail::global_thread_index(); i < total; i += detail::grid_stride()) {
    const std::size_t bt = i / C, c = i % C, t = bt % T;
    const auto token = static_cast<std::size_t>(tokens[bt]);
    out[i] = wte[token * C + c] + wpe[t * C + c];
  }
}

// dwte[tokens[b,t], c] += dout[b,t,c]   (accumulated).
// Thread i -> element i = (b*T + t)*C + c of dout (grid-stride). Two positions holding the same
// token add into the same dwte row, hence atomicAdd (the order of the additions may vary).
__global__ void embedding_backward_wte_kernel(float* dwte, const float* dout, const std::int32_t* tokens,
                                              std::size_t B, std::size_t T, std::size_t C) {
  const std::size_t total = B * T * C;
  for (std::size_t i = detail::global_thread_index(); i < total; i += detail::grid_stride()) {
    const std::size_t bt = i / C, c = i % C;
    const auto token = static_cast<std::size_t>(tokens[bt]);
    atomicAdd(dwte + token * C + c, dout[i]);
  }
}

// dwpe[t, c] += sum_b dout[b,t,c]   (accumulated).
// Thread j -> element j = t*C + c of dwpe (grid-stride): it alone owns that element, so it sums
// over b in registers, in the CPU's order (b = 0, 1, ...), and writes once: no atomics.
__global__ void embedding_backward_wpe_kernel(float* dwpe, const float* dout, std::size_t B, std::size_t T,
                                              std::size_t C) {
  const std::size_t total = T * C;
  for (std::size_t j = detail::global_thread_index(); j < total; j += detail::grid_stride()) {
    float acc = dwpe[j];
    for (std::size_t b = 0; b < B; ++b) acc += dout[b * total + j];  // dout[b,t,c] = dout[b*T*C + t*C + c]
    dwpe[j] = acc;
  }
}

}  // namespace

void embedding_forward(void* stream, float* out, const std::int32_t* tokens, const float* wte, const float* wpe,
                       std::size_t B, std::size_t T, std::size_t C) {
  if (B == 0 || T == 0 || C == 0) return;
  embedding_forward_kernel<<<detail::grid_for(B * T * C, kBlock), kBlock, 0, detail::as_stream(stream)>>>(
      out, tokens, wte, wpe, B, T, C);
  CUDA_CHECK_LAUNCH("embedding_forward_kernel");
}

void embedding_backward(void* stream, float* dwte, float* dwpe, const float* dout, const std::int32_t* tokens,
                        std::size_t B, std::size_t T, std::size_t C) {
  if (B == 0 || T == 0 || C == 0) return;
  const cudaStream_t s = detail::as_stream(stream);
  embedding_backward_wte_kernel<<<detail::grid_for(B * T * C, kBlock), kBlock, 0, s>>>(dwte, dout, tokens, B, T, C);
  CUDA_CHECK_LAUNCH("embedding_backward_wte_kernel");
  embedding_backward_wpe_kernel<<<detail::grid_for(T * C, kBlock), kBlock, 0, s>>>(dwpe, dout, B, T, C);
  CUDA_CHECK_LAUNCH("embedding_backward_wpe_kernel");
}

}  // namespace trainmem::kernels::cuda
