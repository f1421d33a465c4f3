// Flash attention on CUDA: the versions, and the dispatch (formulas in kernels/flash_attention.h).
//
// The versions are kept side by side as teaching steps, in the manner of llm.c's dev/cuda: each
// computes the same out, lse (forward) and dqkv (backward); each file says what it adds and why
// it is faster. All take 16-bit qkv (bf16 or fp16), accumulate in fp32, and handle D = 64 and
// 128 (a template argument), any T (the tail tiles are bounds-checked / zero-filled), causal
// or not (key tiles after the query tile are skipped, never loaded), and grouped K/V heads
// (shape.Hkv, kernels/attention_heads.h): a query head's blocks read its K/V head where it is,
// and each backward's key-side blocks run per K/V head, walking the query heads of its group in
// turn, so dK and dV are summed over the group in registers or shared memory, in head order.
//
//   v1  flash_attention_v1.cu  one thread per query row, scalar fp32 math, K/V tiles of 32 rows
//                              in shared memory, online softmax. Backward: two kernels (dQ with
//                              a thread per query row, dK/dV with a thread per key row),
//                              recomputing P from lse; no atomics.
//   v2  flash_attention_v2.cu  2D register tiling: 128 threads own 64 rows, each computes a 4x4
//                              block of scores and a 4 x D/8 block of O, so each shared-memory
//                              load feeds 4-16 FMAs; 16-byte loads, 3-shuffle row reductions,
//                              exp2f. Backward: v3's (v2 has no backward of its own).
//   v3  flash_attention_v3.cu  tensor cores: mma.sync m16n8k16 (16-bit in, fp32 accumulate) with
//                              ldmatrix fragments, K/V tiles double-buffered with cp.async, P
//                              kept in registers between the two products (FlashAttention-2).
//                              Backward on tensor cores too: dK/dV per 64-key block in
//                              registers, dQ through an fp32 accumulator with atomicAdd.
//
// Backward workspace (caller-provided, flash_attention_backward_workspace_bytes): v1 needs
// Dvec = rowsum(dO * O), B*H*T floats; v2 and v3 need Dvec and the fp32 dQ accumulator,
// B*H*T*(D + 1) floats (plus alignment). H is the query heads: with grouped K/V heads nothing
// more is needed (dK, dV are summed without scratch).
//
// Alignment: v2 and v3 read qkv (and v3 dout) with 16-byte loads, so those pointers must be
// 16-byte aligned (cudaMalloc's are); they throw std::invalid_argument otherwise.
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_utils.cuh"
#include "kernels/cuda/flash_attention_internal.cuh"
#include "kernels/flash_attention_workspace.h"
#include "kernels/flash_attention.h"

namespace trainmem::kernels::cuda {

namespace flash {
namespace {

constexpr int kRowsumWarps = 8;

// One warp per row r = (b*H + h)*T + t: Dvec[r] = sum_k dout[b, t, h*D + k] * out[b, t, h*D + k].
template <typename E>
__global__ void rowsum_dout_out_kernel(float* __restrict__ Dvec, const std::uint16_t* __restrict__ dout,
                                       const std::uint16_t* __restrict__ out, std::size_t rows, std::size_t T,
                                       std::size_t H, std::size_t D) {
  const unsigned lane = threadIdx.x % detail::kWarpSize;
  const std::size_t first = static_cast<std::size_t>(blockIdx.x) * kRowsumWarps + threadIdx.x / detail::kWarpSize;
  const std::size_t step = static_cast<std::size_t>(gridDim.x) * kRowsumWarps;
  for (std::size_t r = first; r < rows; r += step) {
    const std::size_t t = r % T, bh = r / T;
    const std::size_t b = bh / H, h = bh % H;
    const std::size_t at = (b * T + t) * H * D + h * D;
    float sum = 0.0f;
    for (std::size_t k = lane; k < D; k += detail::kWarpSize) sum += E::load(dout[at + k]) * E::load(out[at + k]);
    sum = detail::warp_reduce(sum, detail::SumOp{});
    if (lane == 0) Dvec[r] = sum;
  }
}

}  // namespace

void launch_rowsum_dout_out(cudaStream_t stream, Half16 dtype, float* Dvec, const std::uint16_t* dout,
                            const std::uint16_t* out, const AttentionShape& shape) {
  const std::size_t rows = shape.B * shape.H * shape.T;
  const unsigned grid = detail::grid_for(rows, kRowsumWarps);
  const unsigned block = kRowsumWarps * detail::kWarpSize;
  if (dtype == Half16::bf16)
    rowsum_dout_out_kernel<Bf16><<<grid, block, 0, stream>>>(Dvec, dout, out, rows, shape.T, shape.H, shape.D);
  else
    rowsum_dout_out_kernel<Fp16><<<grid, block, 0, stream>>>(Dvec, dout, out, rows, shape.T, shape.H, shape.D);
  CUDA_CHECK_LAUNCH("flash_attention rowsum_dout_out_kernel");
}

}  // namespace flash

namespace {

constexpr int kVersions = 3;

void check_version(int version, const char* op) {
  if (version < 1 || version > kVersions)
    throw std::invalid_argument(std::string(op) + ": version " + std::to_string(version) + " (versions are 1.." +
                                std::to_string(kVersions) + ")");
}

void check_shape(const AttentionShape& shape, const char* op) {
  if (!flash_attention_takes_head_dim(shape.D))
    throw std::invalid_argument(std::string(op) + ": head dim D = " + std::to_string(shape.D) +
                                " (flash attention kernels exist for 64 and 128)");
  check_kv_heads(shape.H, shape.Hkv, op);
}

bool empty(const AttentionShape& s) { return s.B == 0 || s.T == 0 || s.H == 0; }

}  // namespace

int flash_attention_versions() { return kVersions; }

const char* flash_attention_version_name(int version) {
  switch (version) {
    case 1: return "v1: scalar fp32, one thread per query row (backward: v1, two kernels, no atomics)";
    case 2: return "v2: register-tiled fp32, 4x4 scores per thread (backward: v3's)";
    case 3: return "v3: tensor cores (mma.sync m16n8k16) + cp.async double buffering (backward: v3, mma + atomic dQ)";
    default: return "unknown version";
  }
}

void flash_attention_forward(void* stream, int version, Half16 dtype, std::uint16_t* out, float* lse,
                             const std::uint16_t* qkv, const AttentionShape& shape) {
  check_version(version, "flash_attention_forward");
  check_shape(shape, "flash_attention_forward");
  if (empty(shape)) return;
  cudaStream_t s = detail::as_stream(stream);
  switch (version) {
    case 1: flash::forward_v1(s, dtype, out, lse, qkv, shape); break;
    case 2: flash::forward_v2(s, dtype, out, lse, qkv, shape); break;
    default: flash::forward_v3(s, dtype, out, lse, qkv, shape); break;
  }
}

std::size_t flash_attention_backward_workspace_bytes(int version, const AttentionShape& shape) {
  check_version(version, "flash_attention_backward_workspace_bytes");
  check_shape(shape, "flash_attention_backward_workspace_bytes");
  return kernels::flash_attention_backward_workspace_bytes(version, shape);  // the one formula, on the host
}

void flash_attention_backward(void* stream, int version, Half16 dtype, std::uint16_t* dqkv, const std::uint16_t* dout,
                              const std::uint16_t* qkv, const std::uint16_t* out, const float* lse, void* workspace,
                              const AttentionShape& shape) {
  check_version(version, "flash_attention_backward");
  check_shape(shape, "flash_attention_backward");
  if (empty(shape)) return;
  cudaStream_t s = detail::as_stream(stream);
  if (version == 1) flash::backward_v1(s, dtype, dqkv, dout, qkv, out, lse, workspace, shape);
  else flash::backward_v3(s, dtype, dqkv, dout, qkv, out, lse, workspace, shape);
}

}  // namespace trainmem::kernels::cuda
