// CUDA: token + position embedding, forward and backward (formulas in embedding.h; the CPU reference
// is cpu/embedding.cpp). Tokens must lie in [0, V): they index wte's rows unchecked, as on the CPU.
// Every kernel is a template over the element type D of the tables and activations (float,
// __nv_bfloat16, __half; dtype.cuh): loads widen to float, sums are float, each output is rounded
// once.
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_utils.cuh"
#include "kernels/cuda/dtype.cuh"
#include "kernels/embedding.h"

namespace trainmem::kernels::cuda {

namespace {

constexpr unsigned kBlock = 256;

// out[b,t,c] = wte[tokens[b,t], c] + wpe[t, c].
// Thread i -> element i = (b*T + t)*C + c of out (grid-stride, 64-bit): consecutive threads read
// consecutive channels of one wte row and one wpe row.
template <typename D>
__global__ void embedding_forward_kernel(D* out, const std::int32_t* tokens, const D* wte, const D* wpe, std::size_t B,
                                         std::size_t T, std::size_t C) {
  const std::size_t total = B * T * C;
  for (std::size_t i = detail::global_thread_index(); i < total; i += detail::grid_stride()) {
    const std::size_t bt = i / C, c = i % C, t = bt % T;
    const auto token = static_cast<std::size_t>(tokens[bt]);
    out[i] = detail::from_float<D>(detail::to_float(wte[token * C + c]) + detail::to_float(wpe[t * C + c]));
  }
}

// fp32: dwte[tokens[b,t], c] += dout[b,t,c]   (accumulated).
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

// 16 bits: dwte[token, c] += sum over the positions p holding that token of dout[p, c], summed in
// fp32 and rounded once (a 16-bit atomicAdd would round at every addition).
// Block -> position p = blockIdx.x (its 256 threads -> columns c = blockIdx.y * 256 + threadIdx.x).
// Only the block of a token's FIRST position does the work: it starts from the row's old value and
// adds every position holding the token, in position order (the CPU's order, so the result is the
// CPU's bit for bit), then rounds once. Every other block leaves at once. The scans read the token
// ids only (B*T ints, cached): O((B*T)^2) comparisons in all, no scratch memory and no atomics.
template <typename D>
__global__ void embedding_backward_wte16_kernel(D* dwte, const D* dout, const std::int32_t* tokens,
                                                std::size_t positions, std::size_t C) {
  const std::size_t p = blockIdx.x;
  const std::int32_t token = tokens[p];
  bool seen_before = false;  // does an earlier position hold this token?
  for (std::size_t q = threadIdx.x; q < p; q += blockDim.x) seen_before = seen_before || tokens[q] == token;
  if (__syncthreads_or(seen_before)) return;  // the whole block leaves together
  const std::size_t c = static_cast<std::size_t>(blockIdx.y) * blockDim.x + threadIdx.x;
  if (c >= C) return;
  D* row = dwte + static_cast<std::size_t>(token) * C;
  float acc = detail::to_float(row[c]);
  for (std::size_t q = p; q < positions; ++q)
    if (tokens[q] == token) acc += detail::to_float(dout[q * C + c]);
  row[c] = detail::from_float<D>(acc);
}

// dwpe[t, c] += sum_b dout[b,t,c]   (accumulated).
// Thread j -> element j = t*C + c of dwpe (grid-stride): it alone owns that element, so it sums
// over b in registers, in the CPU's order (b = 0, 1, ...), and writes once: no atomics.
template <typename D>
__global__ void embedding_backward_wpe_kernel(D* dwpe, const D* dout, std::size_t B, std::size_t T, std::size_t C) {
  const std::size_t total = T * C;
  for (std::size_t j = detail::global_thread_index(); j < total; j += detail::grid_stride()) {
    float acc = detail::to_float(dwpe[j]);
    for (std::size_t b = 0; b < B; ++b) acc += detail::to_float(dout[b * total + j]);  // dout[b,t,c] = dout[b*T*C + t*C + c]
    dwpe[j] = detail::from_float<D>(acc);
  }
}

}  // namespace

template <typename T>
void embedding_forward(void* stream, Out<T> out, const std::int32_t* tokens, In<T> wte, In<T> wpe, std::size_t B,
                       std::size_t Tn, std::size_t C) {
  if (B == 0 || Tn == 0 || C == 0) return;
  embedding_forward_kernel<<<detail::grid_for(B * Tn * C, kBlock), kBlock, 0, detail::as_stream(stream)>>>(
      detail::device_cast(out), tokens, detail::device_cast(wte), detail::device_cast(wpe), B, Tn, C);
  CUDA_CHECK_LAUNCH("embedding_forward_kernel");
}

template <typename T>
void embedding_backward(void* stream, Out<T> dwte, Out<T> dwpe, In<T> dout, const std::int32_t* tokens, std::size_t B,
                        std::size_t Tn, std::size_t C) {
  if (B == 0 || Tn == 0 || C == 0) return;
  const cudaStream_t s = detail::as_stream(stream);
  if constexpr (std::is_same_v<T, float>) {
    embedding_backward_wte_kernel<<<detail::grid_for(B * Tn * C, kBlock), kBlock, 0, s>>>(dwte, dout, tokens, B, Tn,
                                                                                          C);
    CUDA_CHECK_LAUNCH("embedding_backward_wte_kernel");
  } else {
    const dim3 grid(detail::exact_grid(B * Tn, 1, "embedding_backward positions"),
                    detail::exact_grid(C, kBlock, "embedding_backward columns"));
    embedding_backward_wte16_kernel<<<grid, kBlock, 0, s>>>(detail::device_cast(dwte), detail::device_cast(dout),
                                                            tokens, B * Tn, C);
    CUDA_CHECK_LAUNCH("embedding_backward_wte16_kernel");
  }
  embedding_backward_wpe_kernel<<<detail::grid_for(Tn * C, kBlock), kBlock, 0, s>>>(detail::device_cast(dwpe),
                                                                                   detail::device_cast(dout), B, Tn, C);
  CUDA_CHECK_LAUNCH("embedding_backward_wpe_kernel");
}

#define TRAINMEM_INSTANTIATE(T)                                                                                      \
  template void embedding_forward<T>(void*, Out<T>, const std::int32_t*, In<T>, In<T>, std::size_t, std::size_t,    \
                                     std::size_t);                                                                   \
  template void embedding_backward<T>(void*, Out<T>, Out<T>, In<T>, const std::int32_t*, std::size_t, std::size_t, \
                                      std::size_t);
TRAINMEM_INSTANTIATE(float)
TRAINMEM_INSTANTIATE(bf16)
TRAINMEM_INSTANTIATE(fp16)
#undef TRAINMEM_INSTANTIATE

}  // namespace trainmem::kernels::cuda
