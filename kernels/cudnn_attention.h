// cuDNN's fused scaled-dot-product attention (its flash attention), through cudnn-frontend's
// graph API (cudnn_frontend::graph::Graph with an sdpa / sdpa_backward node), on the layout of
// kernels/flash_attention.h: qkv[B, T, 3C] in 16 bits (bf16 or fp16), out[B, T, C], and the
// per-row log-sum-exp stats[B, H, T] in fp32 (cuDNN's "Stats" output: max + log(sum exp) of the
// scaled scores, natural log, the same number as flash attention's lse, so either backward can
// use either forward's statistic). Scale 1/sqrt(D); causal = top-left aligned diagonal (key <= query).
//
// No copies: cuDNN reads q, k, v where they are. With grouped K/V heads (shape.Hkv,
// kernels/attention_heads.h) a qkv row is W = (H + 2*Hkv)*D wide (3C for multi-head attention):
// head h of q at time t of batch b is at qkv + b*T*W + t*W + h*D, so Q is the tensor {B, H, T, D}
// with strides {T*W, D, W, 1}; K is {B, Hkv, T, D} with the same strides at offset C = H*D, V the
// same at C + Hkv*D (cuDNN pairs query head h with K/V head h / (H/Hkv), the layout here); out
// and dout are {B, H, T, D} with strides {T*C, D, C, 1}; dqkv has qkv's strides (dqkv is
// written, not accumulated; dK and dV summed over each group by cuDNN, inside its graph).
//
// Graphs are built on first use (cuDNN picks an engine by its heuristics) and cached per
// (device, pass, dtype, B, T, H, Hkv, D, causal); one cuDNN handle per device, on which each call
// sets its stream. The caller provides the workspace (the *_workspace_bytes functions build
// the graph if needed and return what its plan asks for, possibly 0).
//
// Compiled only where cuDNN and cudnn-frontend's headers were found at configure time: code that
// calls this must check TRAINMEM_WITH_CUDNN_FRONTEND (defined to 1 then).
#pragma once
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "kernels/flash_attention.h"

namespace trainmem::kernels::cudnn {

// cuDNN cannot run this graph here (no engine supports the shape, dtype or device): a property
// of the installation, not a bug of the caller. Any other failure is a std::runtime_error.
class NotSupported : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

#if defined(TRAINMEM_WITH_CUDNN_FRONTEND) && TRAINMEM_WITH_CUDNN_FRONTEND

// "cuDNN 9.19.0 (frontend 1.32.0)": the library loaded at run time and the headers compiled in.
std::string version();

std::size_t attention_forward_workspace_bytes(cuda::Half16 dtype, const AttentionShape& shape);
// out[B, T, C], stats[B, H, T] (fp32) written.
void attention_forward(void* stream, cuda::Half16 dtype, std::uint16_t* out, float* stats, const std::uint16_t* qkv,
                       void* workspace, const AttentionShape& shape);

std::size_t attention_backward_workspace_bytes(cuda::Half16 dtype, const AttentionShape& shape);
// dqkv[B, T, W] written, from dout, the forward's inputs, out and stats.
void attention_backward(void* stream, cuda::Half16 dtype, std::uint16_t* dqkv, const std::uint16_t* dout,
                        const std::uint16_t* qkv, const std::uint16_t* out, const float* stats, void* workspace,
                        const AttentionShape& shape);

#endif

}  // namespace trainmem::kernels::cudnn
