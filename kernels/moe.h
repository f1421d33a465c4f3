// Mixture of experts (MoE: Mixtral, Qwen2-MoE), the kernels around the experts' matmuls. N tokens
// (rows), width C, E experts, each token sent to k of them (1 <= k <= E). A is the compute type
// compute_t<T> (kernels/dtype.h): float, or double for the double reference; the dispatchers and
// CUDA take float (the model's storage types are float, bf16 and fp16). Index arrays are int32.
//
// Router (logits = x W_r^T come from a matmul):
//   probs[n,e]     = softmax(logits[n,:])[e]                        (in A, the row's max subtracted)
//   experts[n,:]   = the k largest probs[n,:], largest first; equal probabilities by the lower
//                    expert index (torch.topk's order as used here). A NaN ranks below every number.
//   weights[n,j]   = p_j / S, S = sum_j p_j (renormalize: Mixtral, normalize top-k), else p_j
//                    (Qwen1.5-MoE), p_j = probs[n, experts[n,j]]; then ROUNDED to T and widened
//                    again: weights[n,j] = load(store<T>(w)), since Hugging Face casts the routing
//                    weights to the hidden dtype before it combines (the identity for float/double).
// Router backward (the rounding of the weights taken as the identity), per row, dp in A:
//   dp = aux_dprobs (or 0);  renormalize: w_i = p_i / S recomputed, dp[e_j] += (dw_j - sum_i dw_i w_i) / S
//                            else:                                  dp[e_j] += dw_j
//   dlogits[n,e]   = p_e (dp_e - sum_i p_i dp_i)                     (softmax backward; WRITTEN)
// aux_dprobs [E] (or nullptr) is the load-balancing loss's gradient d loss / d probs[n,e], the same
// for every row. moe_expert_prob_sums gives that loss its P_e: sums[e] = sum_n probs[n,e].
//
// The grouped layout (dropless: every assignment gets a row). The N*k assignments (n, j) are laid
// out by expert: expert 0's first, then expert 1's, ...; within an expert by token n, then j:
//   counts[e] = #{(n,j) : experts[n,j] = e},   offset[e] = sum_{e' < e} counts[e']
//   rows[n,j] = offset[e] + the rank of (n,j) among e's assignments        (a permutation of 0..N*k-1)
// so each expert's rows are one contiguous block of the grouped tensors [N*k, C], one matmul each.
// An expert id outside [0, E) is a logic error: the CPU throws std::invalid_argument; CUDA does
// not check (such an assignment gets no row). A token that names one expert twice (the router
// never does) still gets two rows, in order j.
//
// Dispatch, combine (forward) and their backward; s = sigmoid(shared_gate[n]) (Qwen2-MoE's
// shared expert, gated by a linear C -> 1 of the token: moe_shared_gate_forward):
//   grouped[rows[n,j], :] = x[n, :]                                     (moe_dispatch: a copy)
//   dx[n, :]              = sum_j dgrouped[rows[n,j], :]                (j in order; WRITTEN)
//   out[n,c]              = residual[n,c] + (sum_j weights[n,j] expert_out[rows[n,j], c] + s shared_out[n,c])
//                           (the sum in j order, then the shared term, then the residual added)
//   dweights[n,j]         = sum_c dout[n,c] expert_out[rows[n,j], c]    (c in order; WRITTEN)
//   dexpert_out[rows[n,j], c] = weights[n,j] dout[n,c]                  (WRITTEN)
//   dshared_gate[n]       = s (1 - s) sum_c dout[n,c] shared_out[n,c]   (WRITTEN)
//   dshared[n,c]          = s dout[n,c]                                 (WRITTEN)
//   shared gate:  logits[n] = sum_c x[n,c] weight[c];   backward (both ACCUMULATED):
//                 dx[n,c] += dlogits[n] weight[c],  dweight[c] += sum_n dlogits[n] x[n,c]
// Without a shared expert shared_out, shared_gate (and dshared, dshared_gate) are all nullptr;
// one given without the other is refused (std::invalid_argument). The sigmoid comes from
// e = exp(-|g|) as SwiGLU's (kernels/swiglu.h), so no gate logit overflows it.
//
// In place: moe_combine_backward may write dexpert_out over expert_out and dshared over
// shared_out (the model's use: the saved outputs are read for the last time). Each (n, j) owns the
// row rows[n,j] (the rows are a permutation), and its dot product dweights[n,j] is completed
// before that row is overwritten; the same for token n's shared row and dshared_gate[n].
// moe_combine's out may be residual or shared_out (each element is read before it is written).
// Nothing else may overlap: not dx and x in moe_shared_gate_backward (dweight needs x as it was),
// not grouped and x, not dx and dgrouped, not dlogits and the router's inputs.
//
// Storage type T (kernels/dtype.h): float, bf16 or fp16 (and double on the CPU); computed in A,
// each output rounded once. In 16 bits the CPU result is bit for bit the float kernel's on the
// widened inputs, rounded. Deterministic: no atomics; every sum has a fixed order (the CUDA
// orders are in kernels/cuda/moe.cu), so each backend gives the same bits on every run (the CPU
// on any number of threads). CPU and CUDA differ by rounding only (error bounds:
// kernels/tests/test_moe_cpu.cpp, test_moe_cuda.cu); moe_plan gives the same integers on both.
//
// This header is included by .cu files, so it stays C++17.
#pragma once
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "kernels/dtype.h"
#include "kernels/kernel_cost.h"
#include "kernels/kernel_stream.h"

namespace trainmem::kernels {

// 1 <= k <= E (a caller's bug otherwise: std::invalid_argument).
inline void check_moe_top_k(const char* op, std::size_t E, std::size_t k) {
  if (k < 1 || k > E)
    throw std::invalid_argument(std::string(op) + ": top-" + std::to_string(k) + " of " + std::to_string(E) +
                                " experts (1 <= k <= E is needed)");
}
// The grouped rows are int32: N*k must fit.
inline void check_moe_rows(const char* op, std::size_t N, std::size_t k) {
  if (k != 0 && N > static_cast<std::size_t>(INT32_MAX) / k)
    throw std::invalid_argument(std::string(op) + ": " + std::to_string(N) + " x " + std::to_string(k) +
                                " grouped rows do not fit int32 row indices");
}
// A shared expert is given whole (its output and its gate, and in the backward both gradients) or
// not at all.
inline void check_moe_shared(const char* op, bool shared_out, bool shared_gate) {
  if (shared_out != shared_gate)
    throw std::invalid_argument(std::string(op) + ": the shared expert's output and gate go together " +
                                "(both given, or both nullptr)");
}

namespace cpu {
template <typename T>
void moe_router_forward(compute_t<T>* probs, std::int32_t* experts, compute_t<T>* weights, const T* logits,
                        std::size_t N, std::size_t E, std::size_t k, bool renormalize);
// dlogits written; aux_dprobs may be nullptr.
template <typename T>
void moe_router_backward(T* dlogits, const compute_t<T>* dweights, const compute_t<T>* aux_dprobs,
                         const compute_t<T>* probs, const std::int32_t* experts, std::size_t N, std::size_t E,
                         std::size_t k, bool renormalize);
// sums[e] = sum_n probs[n,e], added in double in n order, rounded once. A: float or double.
template <typename A>
void moe_expert_prob_sums(A* sums, const A* probs, std::size_t N, std::size_t E);
// Throws std::invalid_argument for an expert id outside [0, E).
void moe_plan(std::int32_t* rows, std::int32_t* counts, const std::int32_t* experts, std::size_t N, std::size_t E,
              std::size_t k);
template <typename T>
void moe_dispatch(T* grouped, const T* x, const std::int32_t* rows, std::size_t N, std::size_t k, std::size_t C);
template <typename T>
void moe_dispatch_backward(T* dx, const T* dgrouped, const std::int32_t* rows, std::size_t N, std::size_t k,
                           std::size_t C);
// shared_out, shared_gate: both nullptr without a shared expert.
template <typename T>
void moe_combine(T* out, const T* residual, const T* expert_out, const compute_t<T>* weights, const std::int32_t* rows,
                 const T* shared_out, const T* shared_gate, std::size_t N, std::size_t k, std::size_t C);
// dexpert_out may be expert_out, dshared may be shared_out (in place); dshared, dshared_gate,
// shared_out, shared_gate all nullptr without a shared expert.
template <typename T>
void moe_combine_backward(T* dexpert_out, compute_t<T>* dweights, T* dshared, T* dshared_gate, const T* dout,
                          const T* expert_out, const compute_t<T>* weights, const std::int32_t* rows,
                          const T* shared_out, const T* shared_gate, std::size_t N, std::size_t k, std::size_t C);
template <typename T>
void moe_shared_gate_forward(T* logits, const T* x, const T* weight, std::size_t N, std::size_t C);
// dx and dweight ACCUMULATED.
template <typename T>
void moe_shared_gate_backward(T* dx, T* dweight, const T* dlogits, const T* x, const T* weight, std::size_t N,
                              std::size_t C);
}  // namespace cpu

namespace cuda {
template <typename T = float>
void moe_router_forward(void* stream, float* probs, std::int32_t* experts, float* weights, In<T> logits,
                        std::size_t N, std::size_t E, std::size_t k, bool renormalize);
template <typename T = float>
void moe_router_backward(void* stream, Out<T> dlogits, const float* dweights, const float* aux_dprobs,
                         const float* probs, const std::int32_t* experts, std::size_t N, std::size_t E,
                         std::size_t k, bool renormalize);
void moe_expert_prob_sums(void* stream, float* sums, const float* probs, std::size_t N, std::size_t E);
void moe_plan(void* stream, std::int32_t* rows, std::int32_t* counts, const std::int32_t* experts, std::size_t N,
              std::size_t E, std::size_t k);
template <typename T = float>
void moe_dispatch(void* stream, Out<T> grouped, In<T> x, const std::int32_t* rows, std::size_t N, std::size_t k,
                  std::size_t C);
template <typename T = float>
void moe_dispatch_backward(void* stream, Out<T> dx, In<T> dgrouped, const std::int32_t* rows, std::size_t N,
                           std::size_t k, std::size_t C);
template <typename T = float>
void moe_combine(void* stream, Out<T> out, In<T> residual, In<T> expert_out, const float* weights,
                 const std::int32_t* rows, In<T> shared_out, In<T> shared_gate, std::size_t N, std::size_t k,
                 std::size_t C);
template <typename T = float>
void moe_combine_backward(void* stream, Out<T> dexpert_out, float* dweights, Out<T> dshared, Out<T> dshared_gate,
                          In<T> dout, In<T> expert_out, const float* weights, const std::int32_t* rows,
                          In<T> shared_out, In<T> shared_gate, std::size_t N, std::size_t k, std::size_t C);
template <typename T = float>
void moe_shared_gate_forward(void* stream, Out<T> logits, In<T> x, In<T> weight, std::size_t N, std::size_t C);
template <typename T = float>
void moe_shared_gate_backward(void* stream, Out<T> dx, Out<T> dweight, In<T> dlogits, In<T> x, In<T> weight,
                              std::size_t N, std::size_t C);
}  // namespace cuda

// ------------------------------------------------------------------------------------ dispatchers
// Costs: every tensor read once and written once in its own type (probs, weights, dweights and
// aux_dprobs in fp32, the int32 indices 4 bytes each: extra_bytes); a gathered row counts once.

template <typename T = float>
inline void moe_router_forward(const Stream& s, float* probs, std::int32_t* experts, float* weights, In<T> logits,
                               std::size_t N, std::size_t E, std::size_t k, bool renormalize) {
  check_moe_top_k("moe_router_forward", E, k);
  // reads the logits; writes probs (fp32), experts and weights (4 bytes each); ~5 flops a logit
  // for the softmax, k scans of the row for the top-k.
  KernelCost cost(s, memory_call<T>("moe_router_forward", double(N) * E, 1, 0, 5.0 + k,
                                    4.0 * N * E + 8.0 * N * k));
  if (s.backend == Backend::meta) return;
  if (s.backend == Backend::cpu)
    return cpu::moe_router_forward<T>(probs, experts, weights, logits, N, E, k, renormalize);
  TRAINMEM_CUDA_KERNEL("moe_router_forward", cuda::moe_router_forward<T>(s.cuda_stream, probs, experts, weights,
                                                                           logits, N, E, k, renormalize));
}
template <typename T = float>
inline void moe_router_backward(const Stream& s, Out<T> dlogits, const float* dweights, const float* aux_dprobs,
                                const float* probs, const std::int32_t* experts, std::size_t N, std::size_t E,
                                std::size_t k, bool renormalize) {
  check_moe_top_k("moe_router_backward", E, k);
  // writes dlogits; reads probs (fp32), dweights and experts (4 bytes each), aux_dprobs (E floats)
  KernelCost cost(s, memory_call<T>("moe_router_backward", double(N) * E, 0, 1, 4,
                                    4.0 * N * E + 8.0 * N * k + (aux_dprobs ? 4.0 * E : 0.0)));
  if (s.backend == Backend::meta) return;
  if (s.backend == Backend::cpu)
    return cpu::moe_router_backward<T>(dlogits, dweights, aux_dprobs, probs, experts, N, E, k, renormalize);
  TRAINMEM_CUDA_KERNEL("moe_router_backward",
                       cuda::moe_router_backward<T>(s.cuda_stream, dlogits, dweights, aux_dprobs, probs, experts, N,
                                                    E, k, renormalize));
}
inline void moe_expert_prob_sums(const Stream& s, float* sums, const float* probs, std::size_t N, std::size_t E) {
  KernelCost cost(s, memory_call<float>("moe_expert_prob_sums", double(N) * E, 1, 0, 1, 4.0 * E));
  if (s.backend == Backend::meta) return;
  if (s.backend == Backend::cpu) return cpu::moe_expert_prob_sums<float>(sums, probs, N, E);
  TRAINMEM_CUDA_KERNEL("moe_expert_prob_sums", cuda::moe_expert_prob_sums(s.cuda_stream, sums, probs, N, E));
}
inline void moe_plan(const Stream& s, std::int32_t* rows, std::int32_t* counts, const std::int32_t* experts,
                     std::size_t N, std::size_t E, std::size_t k) {
  check_moe_rows("moe_plan", N, k);
  // int32 throughout (counted as 4-byte elements): reads experts, writes rows and counts; no flops.
  KernelCost cost(s, memory_call<float>("moe_plan", double(N) * k, 1, 1, 0, 4.0 * E));
  if (s.backend == Backend::meta) return;
  if (s.backend == Backend::cpu) return cpu::moe_plan(rows, counts, experts, N, E, k);
  TRAINMEM_CUDA_KERNEL("moe_plan", cuda::moe_plan(s.cuda_stream, rows, counts, experts, N, E, k));
}
template <typename T = float>
inline void moe_dispatch(const Stream& s, Out<T> grouped, In<T> x, const std::int32_t* rows, std::size_t N,
                         std::size_t k, std::size_t C) {
  // reads x once, writes its k copies; reads rows
  KernelCost cost(s, memory_call<T>("moe_dispatch", double(N) * C, 1, double(k), 0, 4.0 * N * k));
  if (s.backend == Backend::meta) return;
  if (s.backend == Backend::cpu) return cpu::moe_dispatch<T>(grouped, x, rows, N, k, C);
  TRAINMEM_CUDA_KERNEL("moe_dispatch", cuda::moe_dispatch<T>(s.cuda_stream, grouped, x, rows, N, k, C));
}
template <typename T = float>
inline void moe_dispatch_backward(const Stream& s, Out<T> dx, In<T> dgrouped, const std::int32_t* rows, std::size_t N,
                                  std::size_t k, std::size_t C) {
  // reads the k gradient rows of each token, writes dx; k - 1 additions an element
  KernelCost cost(s, memory_call<T>("moe_dispatch_backward", double(N) * C, double(k), 1, double(k) - 1,
                                    4.0 * N * k));
  if (s.backend == Backend::meta) return;
  if (s.backend == Backend::cpu) return cpu::moe_dispatch_backward<T>(dx, dgrouped, rows, N, k, C);
  TRAINMEM_CUDA_KERNEL("moe_dispatch_backward",
                       cuda::moe_dispatch_backward<T>(s.cuda_stream, dx, dgrouped, rows, N, k, C));
}
template <typename T = float>
inline void moe_combine(const Stream& s, Out<T> out, In<T> residual, In<T> expert_out, const float* weights,
                        const std::int32_t* rows, In<T> shared_out, In<T> shared_gate, std::size_t N, std::size_t k,
                        std::size_t C) {
  check_moe_shared("moe_combine", shared_out != nullptr, shared_gate != nullptr);
  const double shared = shared_out ? 1.0 : 0.0;
  // reads residual, the k expert rows (and the shared row) of each token, writes out; a multiply-
  // add per term; weights (fp32) and rows (int32) per (n, j), the gate logit per token
  KernelCost cost(s, memory_call<T>("moe_combine", double(N) * C, 1 + double(k) + shared, 1,
                                    2 * (double(k) + shared) + 1, 8.0 * N * k + shared * sizeof(T) * N));
  if (s.backend == Backend::meta) return;
  if (s.backend == Backend::cpu)
    return cpu::moe_combine<T>(out, residual, expert_out, weights, rows, shared_out, shared_gate, N, k, C);
  TRAINMEM_CUDA_KERNEL("moe_combine", cuda::moe_combine<T>(s.cuda_stream, out, residual, expert_out, weights, rows,
                                                             shared_out, shared_gate, N, k, C));
}
template <typename T = float>
inline void moe_combine_backward(const Stream& s, Out<T> dexpert_out, float* dweights, Out<T> dshared,
                                 Out<T> dshared_gate, In<T> dout, In<T> expert_out, const float* weights,
                                 const std::int32_t* rows, In<T> shared_out, In<T> shared_gate, std::size_t N,
                                 std::size_t k, std::size_t C) {
  check_moe_shared("moe_combine_backward", shared_out != nullptr, shared_gate != nullptr);
  check_moe_shared("moe_combine_backward", shared_out != nullptr, dshared != nullptr);
  check_moe_shared("moe_combine_backward", shared_out != nullptr, dshared_gate != nullptr);
  const double shared = shared_out ? 1.0 : 0.0;
  // reads dout, the k expert rows (and the shared row) of each token; writes their gradients; per
  // term a dot product's multiply-add and a product. weights read, dweights written (fp32), rows
  // (int32); the gate logit read and its gradient written per token
  KernelCost cost(s, memory_call<T>("moe_combine_backward", double(N) * C, 1 + double(k) + shared,
                                    double(k) + shared, 3 * (double(k) + shared),
                                    12.0 * N * k + shared * 2.0 * sizeof(T) * N));
  if (s.backend == Backend::meta) return;
  if (s.backend == Backend::cpu)
    return cpu::moe_combine_backward<T>(dexpert_out, dweights, dshared, dshared_gate, dout, expert_out, weights, rows,
                                        shared_out, shared_gate, N, k, C);
  TRAINMEM_CUDA_KERNEL("moe_combine_backward",
                       cuda::moe_combine_backward<T>(s.cuda_stream, dexpert_out, dweights, dshared, dshared_gate, dout,
                                                     expert_out, weights, rows, shared_out, shared_gate, N, k, C));
}
template <typename T = float>
inline void moe_shared_gate_forward(const Stream& s, Out<T> logits, In<T> x, In<T> weight, std::size_t N,
                                    std::size_t C) {
  // reads x, a multiply-add per element; the weight row read and the N logits written
  KernelCost cost(s, memory_call<T>("moe_shared_gate_forward", double(N) * C, 1, 0, 2, sizeof(T) * (double(C) + N)));
  if (s.backend == Backend::meta) return;
  if (s.backend == Backend::cpu) return cpu::moe_shared_gate_forward<T>(logits, x, weight, N, C);
  TRAINMEM_CUDA_KERNEL("moe_shared_gate_forward",
                       cuda::moe_shared_gate_forward<T>(s.cuda_stream, logits, x, weight, N, C));
}
template <typename T = float>
inline void moe_shared_gate_backward(const Stream& s, Out<T> dx, Out<T> dweight, In<T> dlogits, In<T> x, In<T> weight,
                                     std::size_t N, std::size_t C) {
  // dx read and written, x read, two multiply-adds per element; weight read, dweight read and
  // written, dlogits read
  KernelCost cost(s, memory_call<T>("moe_shared_gate_backward", double(N) * C, 2, 1, 4,
                                    sizeof(T) * (3.0 * C + N)));
  if (s.backend == Backend::meta) return;
  if (s.backend == Backend::cpu) return cpu::moe_shared_gate_backward<T>(dx, dweight, dlogits, x, weight, N, C);
  TRAINMEM_CUDA_KERNEL("moe_shared_gate_backward",
                       cuda::moe_shared_gate_backward<T>(s.cuda_stream, dx, dweight, dlogits, x, weight, N, C));
}
}  // namespace trainmem::kernels
