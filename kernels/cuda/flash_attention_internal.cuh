// Shared by the flash attention versions (kernels/cuda/flash_attention*.cu): the 16-bit element
// types, the layout arithmetic, the masking and the online softmax, the per-version entry points
// the dispatcher calls, and the small
// PTX wrappers (ldmatrix, mma.sync, cp.async) of the tensor-core version. Included by .cu only.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/shared_memory_limit.h"
#include "kernels/flash_attention.h"

namespace trainmem::kernels::cuda::flash {

// ---------------------------------------------------------------------------------------------
// The two 16-bit formats as kernel template arguments. Storage is uint16_t everywhere; load()
// widens exactly (16 bit -> fp32 is exact), store() rounds to nearest even, as convert.cu does.
struct Bf16 {
  using type = __nv_bfloat16;
  using pair = __nv_bfloat162;
  static __device__ __forceinline__ float load(std::uint16_t x) { return __bfloat162float(__ushort_as_bfloat16(x)); }
  static __device__ __forceinline__ std::uint16_t store(float x) {
    return __bfloat16_as_ushort(__float2bfloat16_rn(x));
  }
  // Two floats as one 32-bit register of two 16-bit values, lo in the low half (mma operand order).
  static __device__ __forceinline__ std::uint32_t pack(float lo, float hi) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const std::uint32_t*>(&v);
  }
};
struct Fp16 {
  using type = __half;
  using pair = __half2;
  static __device__ __forceinline__ float load(std::uint16_t x) { return __half2float(__ushort_as_half(x)); }
  static __device__ __forceinline__ std::uint16_t store(float x) { return __half_as_ushort(__float2half_rn(x)); }
  static __device__ __forceinline__ std::uint32_t pack(float lo, float hi) {
    const __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const std::uint32_t*>(&v);
  }
};

// ---------------------------------------------------------------------------------------------
// Layout (flash_attention.h, attention_heads.h): qkv[B, T, W] with W = (H + 2 Hkv) D, rows
// [q heads | k heads | v heads]; out/dout[B, T, C], lse/Dvec[B, H, T], C = H*D. Query head h reads
// K/V head h / group. Every kernel gets one block row per (b, h) (blockIdx.y = b*H + h; the
// backwards' key-side kernels one per (b, K/V head)) and computes the offsets of its heads once;
// all offsets are 64-bit.
struct Dims {
  int T;            // sequence length
  int H;            // query heads
  int Hkv;          // K/V heads
  int group;        // query heads per K/V head, H / Hkv
  std::size_t C;    // channels H*D (a row of out, dout; q's part of a qkv row)
  std::size_t W;    // a row of qkv and dqkv, (H + 2 Hkv) D
  float scale;      // 1/sqrt(D)
  bool causal;
};

inline Dims make_dims(const AttentionShape& s) {
  if (s.D != 64 && s.D != 128)
    throw std::invalid_argument("flash_attention: head dim D = " + std::to_string(s.D) + " (only 64 and 128)");
  if (s.T > 0x7fffffffu) throw std::invalid_argument("flash_attention: T does not fit an int");
  if (s.B * s.H > 65535u)
    throw std::invalid_argument("flash_attention: B*H = " + std::to_string(s.B * s.H) + " exceeds 65535 (gridDim.y)");
  check_kv_heads(s.H, s.Hkv, "flash_attention");
  Dims d{};
  d.T = static_cast<int>(s.T);
  d.H = static_cast<int>(s.H);
  d.Hkv = static_cast<int>(s.kv_heads());
  d.group = static_cast<int>(s.group());
  d.C = s.C();
  d.W = s.qkv_width();
  d.scale = 1.0f / std::sqrt(static_cast<float>(s.D));
  d.causal = s.causal;
  return d;
}

// Offsets of query head (b, h) = bh: its q row 0 in qkv (and dq's in dqkv), its K/V head's k and
// v row 0 in qkv (dk, dv in dqkv), its o row 0 in out (and dout), its row 0 in lse (and Dvec).
struct HeadOffsets {
  std::size_t q, k, v, o, row;
};
__device__ __forceinline__ HeadOffsets head_offsets(const Dims& d, int bh, int D) {
  const std::size_t b = static_cast<std::size_t>(bh / d.H), h = static_cast<std::size_t>(bh % d.H);
  const std::size_t g = h / static_cast<std::size_t>(d.group);
  const std::size_t T = static_cast<std::size_t>(d.T), batch = b * T * d.W;
  return {batch + h * D, batch + d.C + g * D, batch + d.C + (static_cast<std::size_t>(d.Hkv) + g) * D,
          b * T * d.C + h * D, static_cast<std::size_t>(bh) * T};
}
// The query head `member` (0 .. group-1) of K/V head (b, g) = bg, as the b*H + h of head_offsets.
__device__ __forceinline__ int group_member(const Dims& d, int bg, int member) {
  return (bg / d.Hkv) * d.H + (bg % d.Hkv) * d.group + member;
}

// Dynamic shared memory above 48 KiB must be asked for per kernel, up to the device's opt-in limit
// (sm_80: 163 KiB, sm_90: 227 KiB per block); more than that is refused here, with the sizes.
template <typename Kernel>
void allow_shared_memory(Kernel kernel, std::size_t bytes, const char* name) {
  int device = 0, optin = 0;
  ::trainmem::kernels::cuda::detail::check_cuda(cudaGetDevice(&device), "cudaGetDevice", __FILE__, __LINE__);
  ::trainmem::kernels::cuda::detail::check_cuda(
      cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device),
      "cudaDeviceGetAttribute(cudaDevAttrMaxSharedMemoryPerBlockOptin)", __FILE__, __LINE__);
  const std::string refusal = shared_memory_refusal(name, bytes, static_cast<std::size_t>(optin), device);
  if (!refusal.empty()) throw std::runtime_error(refusal);
  if (bytes > 48u * 1024u)
    ::trainmem::kernels::cuda::detail::check_cuda(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)),
        ("cudaFuncSetAttribute(" + std::string(name) + ")").c_str(), __FILE__, __LINE__);
}

// ---------------------------------------------------------------------------------------------
// The masking and the online softmax, said once for every version.
//
// Query row t sees key u when u is within the sequence and, causal, not after t.
__device__ __forceinline__ bool key_visible(const Dims& d, int t, int u) { return u < d.T && (!d.causal || u <= t); }
// The keys a tile of queries [q0, q0 + rows) reads: all T, or (causal) none past its last query.
__device__ __forceinline__ int keys_end(const Dims& d, int q0, int rows) { return d.causal ? min(d.T, q0 + rows) : d.T; }
// Whether a tile of keys [k0, k0 + cols) hides a key from some query of a tile that starts at q0:
// it runs past T, or (causal) its last key comes after q0. Only such tiles test key_visible.
__device__ __forceinline__ bool tile_needs_mask(const Dims& d, int q0, int k0, int cols) {
  return k0 + cols > d.T || (d.causal && k0 + cols - 1 > q0);
}
// One row's online-softmax step, in log2 units (v2 and v3 fold log2 e into the scale), after a
// tile whose largest score is tile_max: m becomes max(m, tile_max); returned are the max the
// tile's scores subtract, m_use, and alpha = 2^(m_old - m_use), the factor on what was summed
// under the old max. While nothing is visible (m = -inf) m_use is 0, so 2^(-inf - 0) = 0 for every
// masked score and alpha = 0: never -inf - (-inf) = NaN.
struct SoftmaxStep {
  float m_use;
  float alpha;
};
__device__ __forceinline__ SoftmaxStep online_softmax_step(float& m, float tile_max) {
  const float m_new = fmaxf(m, tile_max);
  const float m_use = m_new == -INFINITY ? 0.0f : m_new;
  const SoftmaxStep step{m_use, exp2f(m - m_use)};
  m = m_new;
  return step;
}

inline void require_aligned(const void* p, std::size_t bytes, const char* what) {
  if (reinterpret_cast<std::uintptr_t>(p) % bytes != 0)
    throw std::invalid_argument(std::string("flash_attention: ") + what + " must be " + std::to_string(bytes) +
                                "-byte aligned");
}

// ---------------------------------------------------------------------------------------------
// Entry points of each version (host functions, launching on `stream`). Shapes are validated
// by the dispatcher (flash_attention.cu) before they are called; B, T, H are all > 0.
void forward_v1(cudaStream_t stream, Half16 dtype, std::uint16_t* out, float* lse, const std::uint16_t* qkv,
                const AttentionShape& shape);
void backward_v1(cudaStream_t stream, Half16 dtype, std::uint16_t* dqkv, const std::uint16_t* dout,
                 const std::uint16_t* qkv, const std::uint16_t* out, const float* lse, void* workspace,
                 const AttentionShape& shape);

void forward_v2(cudaStream_t stream, Half16 dtype, std::uint16_t* out, float* lse, const std::uint16_t* qkv,
                const AttentionShape& shape);

void forward_v3(cudaStream_t stream, Half16 dtype, std::uint16_t* out, float* lse, const std::uint16_t* qkv,
                const AttentionShape& shape);
void backward_v3(cudaStream_t stream, Half16 dtype, std::uint16_t* dqkv, const std::uint16_t* dout,
                 const std::uint16_t* qkv, const std::uint16_t* out, const float* lse, void* workspace,
                 const AttentionShape& shape);

// Dvec[b, h, t] = sum_d dout[b, t, h*D + d] * out[b, t, h*D + d] (fp32), the per-row term of the
// softmax backward; written for every row. Defined in flash_attention.cu, used by v1 and v3.
void launch_rowsum_dout_out(cudaStream_t stream, Half16 dtype, float* Dvec, const std::uint16_t* dout,
                            const std::uint16_t* out, const AttentionShape& shape);

// ---------------------------------------------------------------------------------------------
// PTX wrappers for the tensor-core version (sm_80+).
//
// cp.async: 16 bytes global -> shared without passing through registers; the copy runs while
// the warp goes on computing. src_bytes = 0 writes 16 zero bytes instead (tail rows past T).
// Both addresses must be 16-byte aligned (PTX: cp.async addresses are aligned to cp-size): every
// global offset used is a multiple of 8 elements (rows of W or C, heads of D, W and C multiples of
// D, D = 64 or 128) from a 16-byte-aligned base, and the shared rows are (D + 8) * 2 bytes.
__device__ __forceinline__ void cp_async_16(void* smem, const void* gmem, bool valid) {
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  const int src_bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(gmem), "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
// Waits until at most N of this thread's committed groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// ldmatrix: four 8x8 matrices of 16-bit values from shared memory; lanes 8i..8i+7 give the row
// addresses of matrix i, and each lane receives, in r[i], the two elements of matrix i at row
// lane/4, columns 2*(lane%4) and 2*(lane%4)+1. The .trans form delivers the transposed matrices.
__device__ __forceinline__ void ldmatrix_x4(std::uint32_t (&r)[4], const void* smem_row) {
  const unsigned addr = static_cast<unsigned>(__cvta_generic_to_shared(smem_row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4_trans(std::uint32_t (&r)[4], const void* smem_row) {
  const unsigned addr = static_cast<unsigned>(__cvta_generic_to_shared(smem_row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// D = A B + D with A 16x16 (row), B 16x8 (col), fp32 accumulators. Fragments (g = lane/4,
// c = lane%4): a[0] = A[g][2c..2c+1], a[1] = A[g+8][2c..], a[2] = A[g][2c+8..], a[3] = A[g+8][2c+8..];
// b[0] = B[2c..2c+1][g], b[1] = B[2c+8..2c+9][g]; d[0..1] = D[g][2c..2c+1], d[2..3] = D[g+8][2c..2c+1].
template <typename E>
__device__ __forceinline__ void mma_16816(float (&d)[4], const std::uint32_t (&a)[4], std::uint32_t b0,
                                          std::uint32_t b1);
template <>
__device__ __forceinline__ void mma_16816<Bf16>(float (&d)[4], const std::uint32_t (&a)[4], std::uint32_t b0,
                                                std::uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
template <>
__device__ __forceinline__ void mma_16816<Fp16>(float (&d)[4], const std::uint32_t (&a)[4], std::uint32_t b0,
                                                std::uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

}  // namespace trainmem::kernels::cuda::flash
