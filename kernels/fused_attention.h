// Attention in O(T) memory, flash or cuDNN, as one call a direction: the dispatcher the model
// calls, choosing per backend as every kernel of kernels/ does (kernels/adamw.h is the pattern).
//
//   kernel   CPU                                   CUDA                              meta
//   flash    the tiled reference (flash_attention.h)  the newest CUDA version (v1-v3)  nothing
//   cudnn    refused (a GPU kernel)                cuDNN's fused SDPA (cudnn_attention.h)  nothing
//
// Both save what the backward needs, out and the fp32 log-sum-exp per row (flash_attention.h
// has the algorithm and the layout), and declare the same cost (flash_attention_cost), named by
// the kernel. The workspace is the caller's to allocate, so that the allocator sees it:
// fused_attention_workspace_bytes says how much a call takes where it runs. `cuda_pattern`: the
// call follows the CUDA backend's allocations (a GPU, or a meta run of its pattern), where the
// kernels take 16-bit storage only.
#pragma once
#include <cstddef>
#include <cstdint>
#include <stdexcept>

#include "kernels/cudnn_attention.h"
#include "kernels/dtype.h"
#include "kernels/flash_attention.h"
#include "kernels/flash_attention_workspace.h"
#include "kernels/kernel_cost.h"
#include "kernels/kernel_stream.h"

namespace trainmem::kernels {

enum class FusedAttentionKernel { flash, cudnn };

inline const char* fused_attention_name(FusedAttentionKernel kernel, bool backward) {
  if (kernel == FusedAttentionKernel::cudnn) return backward ? "cudnn_attention_backward" : "cudnn_attention_forward";
  return backward ? "flash_attention_backward" : "flash_attention_forward";
}

namespace detail {
[[noreturn]] inline void no_cudnn() {
  throw std::invalid_argument("--attention cudnn: trainmem was built without cuDNN's frontend headers (run ci/setup)");
}
// T's 16-bit tag for the CUDA kernels, which take 16-bit storage only (the model refuses fp32
// before it gets here: check_attention_runs).
template <typename T>
Half16 half_of() {
  if constexpr (is_16bit_v<T>) {
    return half16_of<T>();
  } else {
    throw std::invalid_argument("flash and cuDNN attention run on a GPU in 16 bits");
  }
}
template <typename T>
std::uint16_t* bits(T* p) {
  return reinterpret_cast<std::uint16_t*>(p);
}
template <typename T>
const std::uint16_t* bits(const T* p) {
  return reinterpret_cast<const std::uint16_t*>(p);
}
}  // namespace detail

// The workspace one call takes, in bytes: on the CUDA pattern the flash backward's scratch
// (flash_attention_workspace.h, on meta too), cuDNN's what its plan asks for on a GPU (a meta run
// cannot know it: 0, the one rule by which the meta run of the CUDA pattern differs from a GPU;
// common/device/README.md, "The meta device"); none on the CPU and for the flash forward.
template <typename T>
std::size_t fused_attention_workspace_bytes(const Stream& s, bool cuda_pattern, FusedAttentionKernel kernel,
                                            bool backward, const AttentionShape& shape) {
  if (!cuda_pattern) return 0;
  if (kernel == FusedAttentionKernel::flash)
    return backward ? flash_attention_backward_workspace_bytes(kFlashAttentionNewestVersion, shape) : 0;
  if (s.backend != Backend::cuda) return 0;
#if defined(TRAINMEM_WITH_CUDNN_FRONTEND) && TRAINMEM_WITH_CUDNN_FRONTEND
  return backward ? cudnn::attention_backward_workspace_bytes(detail::half_of<T>(), shape)
                  : cudnn::attention_forward_workspace_bytes(detail::half_of<T>(), shape);
#else
  detail::no_cudnn();
#endif
}

// out[B, T, C] and lse[B, H, T] (fp32) from qkv.
template <typename T>
void fused_attention_forward(const Stream& s, bool cuda_pattern, FusedAttentionKernel kernel, T* out, float* lse,
                             const T* qkv, void* workspace, const AttentionShape& shape) {
  KernelCost cost(s, flash_attention_cost<T>(fused_attention_name(kernel, false), shape, false));
  (void)workspace;  // (cuDNN's; none in a build without it)
  if (s.backend == Backend::meta) return;
  if (!cuda_pattern) {
    if (kernel == FusedAttentionKernel::cudnn)
      throw std::invalid_argument("--attention cudnn needs a CUDA device; on the CPU use --attention flash");
    return cpu::flash_attention_forward<T>(out, lse, qkv, shape);
  }
  if (kernel == FusedAttentionKernel::flash) {
    TRAINMEM_CUDA_KERNEL("flash_attention_forward",
                         cuda::flash_attention_forward(s.cuda_stream, cuda::flash_attention_versions(), detail::half_of<T>(),
                                                       detail::bits(out), lse, detail::bits(qkv), shape));
    return;
  }
#if defined(TRAINMEM_WITH_CUDNN_FRONTEND) && TRAINMEM_WITH_CUDNN_FRONTEND
  cudnn::attention_forward(s.cuda_stream, detail::half_of<T>(), detail::bits(out), lse, detail::bits(qkv), workspace, shape);
#else
  detail::no_cudnn();
#endif
}

// dqkv (written, not accumulated) from dout, qkv, out and lse.
template <typename T>
void fused_attention_backward(const Stream& s, bool cuda_pattern, FusedAttentionKernel kernel, T* dqkv, const T* dout,
                              const T* qkv, const T* out, const float* lse, void* workspace,
                              const AttentionShape& shape) {
  KernelCost cost(s, flash_attention_cost<T>(fused_attention_name(kernel, true), shape, true));
  (void)workspace;  // (none in a build without CUDA)
  if (s.backend == Backend::meta) return;
  if (!cuda_pattern) {
    if (kernel == FusedAttentionKernel::cudnn)
      throw std::invalid_argument("--attention cudnn needs a CUDA device; on the CPU use --attention flash");
    return cpu::flash_attention_backward<T>(dqkv, dout, qkv, out, lse, shape);
  }
  if (kernel == FusedAttentionKernel::flash) {
    TRAINMEM_CUDA_KERNEL("flash_attention_backward",
                         cuda::flash_attention_backward(s.cuda_stream, kFlashAttentionNewestVersion, detail::half_of<T>(),
                                                        detail::bits(dqkv), detail::bits(dout), detail::bits(qkv),
                                                        detail::bits(out), lse, workspace, shape));
    return;
  }
#if defined(TRAINMEM_WITH_CUDNN_FRONTEND) && TRAINMEM_WITH_CUDNN_FRONTEND
  cudnn::attention_backward(s.cuda_stream, detail::half_of<T>(), detail::bits(dqkv), detail::bits(dout),
                            detail::bits(qkv), detail::bits(out), lse, workspace, shape);
#else
  detail::no_cudnn();
#endif
}

}  // namespace trainmem::kernels
