// The kernels (kernels/*.h) run once on the GPU, host vectors in and host vectors out, the way the
// kernel tests run them: the inputs uploaded, every WRITTEN output poisoned first (NaN, so an
// element the kernel forgets fails the comparison), ACCUMULATED outputs starting from the values
// given, the call on the given stream, then finish() (which reports a kernel's error) and the
// outputs downloaded. Workspaces are poisoned too: a kernel must write them before it reads them.
// Shared by test_kernels_cuda.cu (fp32), test_kernels_dtype_cuda.cu (bf16, fp16) and
// test_kernels_large_cuda.cu; T is the storage type. CUDA tests only.
#pragma once
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "kernels/attention.h"
#include "kernels/cross_entropy.h"
#include "kernels/embedding.h"
#include "kernels/gelu.h"
#include "kernels/layernorm.h"
#include "kernels/residual.h"
#include "kernels/tests/cuda_test_support.cuh"

namespace trainmem::kernels::cuda_test {

// ---------------------------------------------------------------------------------------- GELU, residual

template <typename T>
std::vector<T> gpu_gelu_forward(void* stream, const std::vector<T>& inp) {
  const DeviceBuffer<T> d_inp(inp);
  PoisonedBuffer<T> d_out(inp.size());
  cuda::gelu_forward<T>(stream, d_out.get(), d_inp.get(), inp.size());
  finish();
  return d_out.download();
}

// in_place: dinp written over dout, as the model calls it.
template <typename T>
std::vector<T> gpu_gelu_backward(void* stream, const std::vector<T>& inp, const std::vector<T>& dout, bool in_place) {
  const DeviceBuffer<T> d_inp(inp), d_dout(dout);
  PoisonedBuffer<T> d_dinp(in_place ? 0 : dout.size());
  T* dinp = in_place ? d_dout.get() : d_dinp.get();
  cuda::gelu_backward<T>(stream, dinp, d_inp.get(), d_dout.get(), dout.size());
  finish();
  return in_place ? d_dout.download() : d_dinp.download();
}

template <typename T>
std::vector<T> gpu_residual_forward(void* stream, const std::vector<T>& a, const std::vector<T>& b) {
  const DeviceBuffer<T> d_a(a), d_b(b);
  PoisonedBuffer<T> d_out(a.size());
  cuda::residual_forward<T>(stream, d_out.get(), d_a.get(), d_b.get(), a.size());
  finish();
  return d_out.download();
}

// ---------------------------------------------------------------------------------------- LayerNorm

// out in T; the row statistics in fp32.
template <typename T>
struct LayerNormForwardResult {
  std::vector<T> out;
  std::vector<float> mean, rstd;
};

template <typename T>
LayerNormForwardResult<T> gpu_layernorm_forward(void* stream, const std::vector<T>& x, const std::vector<T>& weight,
                                               const std::vector<T>& bias, std::size_t N, std::size_t C) {
  const DeviceBuffer<T> d_x(x), d_w(weight), d_b(bias);
  PoisonedBuffer<T> d_out(N * C);
  PoisonedBuffer<float> d_mean(N), d_rstd(N);
  cuda::layernorm_forward<T>(stream, d_out.get(), d_mean.get(), d_rstd.get(), d_x.get(), d_w.get(), d_b.get(), N, C);
  finish();
  return {d_out.download(), d_mean.download(), d_rstd.download()};
}

// The backward's accumulated outputs: their starting values going in, the sums coming out.
template <typename T>
struct LayerNormGrads {
  std::vector<T> dx, dweight, dbias;
};

// From the given (the CPU's) mean and rstd.
template <typename T>
LayerNormGrads<T> gpu_layernorm_backward(void* stream, const LayerNormGrads<T>& start, const std::vector<T>& dout,
                                         const std::vector<T>& x, const std::vector<T>& weight,
                                         const std::vector<float>& mean, const std::vector<float>& rstd, std::size_t N,
                                         std::size_t C) {
  const DeviceBuffer<T> d_dx(start.dx), d_dw(start.dweight), d_db(start.dbias), d_dout(dout), d_x(x), d_w(weight);
  const DeviceBuffer<float> d_mean(mean), d_rstd(rstd);
  PoisonedBuffer<float> d_workspace(layernorm_backward_workspace_bytes(N, C) / sizeof(float));
  cuda::layernorm_backward<T>(stream, d_dx.get(), d_dw.get(), d_db.get(), d_dout.get(), d_x.get(), d_w.get(),
                              d_mean.get(), d_rstd.get(), d_workspace.get(), N, C);
  finish();
  return {d_dx.download(), d_dw.download(), d_db.download()};
}

// ---------------------------------------------------------------------------------------- embedding

// wpe empty: no position table (Llama).
template <typename T>
std::vector<T> gpu_embedding_forward(void* stream, const std::vector<std::int32_t>& tokens, const std::vector<T>& wte,
                                     const std::vector<T>& wpe, std::size_t B, std::size_t Tn, std::size_t C) {
  const DeviceBuffer<std::int32_t> d_tokens(tokens);
  const DeviceBuffer<T> d_wte(wte), d_wpe(wpe);
  PoisonedBuffer<T> d_out(B * Tn * C);
  cuda::embedding_forward<T>(stream, d_out.get(), d_tokens.get(), d_wte.get(), wpe.empty() ? nullptr : d_wpe.get(), B,
                             Tn, C);
  finish();
  return d_out.download();
}

// The accumulated outputs; dwpe empty: no position table.
template <typename T>
struct EmbeddingGrads {
  std::vector<T> dwte, dwpe;
};

template <typename T>
EmbeddingGrads<T> gpu_embedding_backward(void* stream, const EmbeddingGrads<T>& start, const std::vector<T>& dout,
                                         const std::vector<std::int32_t>& tokens, std::size_t B, std::size_t Tn,
                                         std::size_t C) {
  const DeviceBuffer<std::int32_t> d_tokens(tokens);
  const DeviceBuffer<T> d_dout(dout), d_dwte(start.dwte), d_dwpe(start.dwpe);
  PoisonedBuffer<std::uint32_t> d_workspace(embedding_backward_workspace_bytes(B * Tn) / sizeof(std::uint32_t));
  const bool with_wpe = !start.dwpe.empty();
  cuda::embedding_backward<T>(stream, d_dwte.get(), with_wpe ? d_dwpe.get() : nullptr, d_dout.get(), d_tokens.get(),
                              d_workspace.get(), B, Tn, C);
  finish();
  return {d_dwte.download(), with_wpe ? d_dwpe.download() : std::vector<T>()};
}

// ---------------------------------------------------------------------------------------- attention

template <typename T>
struct AttentionForwardResult {
  std::vector<T> out, preatt, att;
};

template <typename T>
AttentionForwardResult<T> gpu_attention_forward(void* stream, const std::vector<T>& qkv, std::size_t B, std::size_t Tn,
                                               std::size_t C, std::size_t NH) {
  const std::size_t scores = B * NH * Tn * Tn;
  const DeviceBuffer<T> d_qkv(qkv);
  PoisonedBuffer<T> d_out(B * Tn * C), d_preatt(scores), d_att(scores);
  cuda::attention_forward<T>(stream, d_out.get(), d_preatt.get(), d_att.get(), d_qkv.get(), B, Tn, C, NH);
  finish();
  return {d_out.download(), d_preatt.download(), d_att.download()};
}

// dpreatt: what the kernel leaves in its dscores buffer on return. dqkv is written in full (the q,
// k and v thirds), never accumulated.
template <typename T>
struct AttentionBackwardResult {
  std::vector<T> dqkv, dpreatt;
};

// From the given (the CPU's) att.
template <typename T>
AttentionBackwardResult<T> gpu_attention_backward(void* stream, const std::vector<T>& dout, const std::vector<T>& qkv,
                                                 const std::vector<T>& att, std::size_t B, std::size_t Tn,
                                                 std::size_t C, std::size_t NH) {
  const DeviceBuffer<T> d_dout(dout), d_qkv(qkv), d_att(att);
  PoisonedBuffer<T> d_dqkv(qkv.size()), d_dscores(att.size());
  cuda::attention_backward<T>(stream, d_dqkv.get(), d_dscores.get(), d_dout.get(), d_qkv.get(), d_att.get(), B, Tn, C,
                              NH);
  finish();
  return {d_dqkv.download(), d_dscores.download()};
}

// ---------------------------------------------------------------------------------------- cross-entropy

// N rows of V classes in rows of Vp logits.
template <typename T>
std::vector<float> gpu_cross_entropy_forward(void* stream, const std::vector<T>& logits,
                                             const std::vector<std::int32_t>& targets, std::size_t N, std::size_t V,
                                             std::size_t Vp) {
  const DeviceBuffer<T> d_logits(logits);
  const DeviceBuffer<std::int32_t> d_targets(targets);
  PoisonedBuffer<float> d_losses(N);
  cuda::cross_entropy_forward<T>(stream, d_losses.get(), d_logits.get(), d_targets.get(), N, V, Vp);
  finish();
  return d_losses.download();
}

template <typename T>
struct CrossEntropyResult {
  std::vector<float> losses;
  std::vector<T> dlogits;
  std::vector<T> logits;  // the logits' buffer after the call: the input (out of place) or dlogits (in place)
};

// The fused forward and backward; in_place: dlogits written over the logits, as the GPT head calls it.
template <typename T>
CrossEntropyResult<T> gpu_cross_entropy_forward_backward(void* stream, const std::vector<T>& logits,
                                                         const std::vector<std::int32_t>& targets, float dloss,
                                                         std::size_t N, std::size_t V, std::size_t Vp, bool in_place) {
  const DeviceBuffer<T> d_logits(logits);
  const DeviceBuffer<std::int32_t> d_targets(targets);
  PoisonedBuffer<T> d_dlogits(in_place ? 0 : logits.size());
  PoisonedBuffer<float> d_losses(N);
  cuda::cross_entropy_forward_backward<T>(stream, d_losses.get(), in_place ? d_logits.get() : d_dlogits.get(),
                                          d_logits.get(), d_targets.get(), dloss, N, V, Vp);
  finish();
  std::vector<T> logits_after = d_logits.download();
  std::vector<T> dlogits = in_place ? logits_after : d_dlogits.download();
  return {d_losses.download(), std::move(dlogits), std::move(logits_after)};
}

}  // namespace trainmem::kernels::cuda_test
