// CUDA: the linear layer with 16-bit (bf16 / fp16) operands on cuBLASLt, fp32 accumulation on the
// tensor cores (formulas in kernels/matmul16.h; the fp32 version on cuBLAS is matmul.cu).
//
// Every GEMM is one cublasLtMatmul: compute type CUBLAS_COMPUTE_32F, scale type fp32 (alpha and
// beta are host floats), A, B, C and D all CUDA_R_16BF or all CUDA_R_16F. The products are summed in
// fp32 and D = alpha * op(A) op(B) + beta * C (+ bias) is rounded to 16 bits once, at the end. Split-K
// algorithms are restricted to reducing their partial sums in fp32 (REDUCTION_SCHEME_NONE or
// COMPUTE_TYPE): the INPLACE and OUTPUT_TYPE schemes would add partial sums that were already
// rounded to 16 bits, i.e. round more than once.
//
// Row-major on a column-major library (as in matmul.cu): a row-major X[rows, cols] is, in the same
// memory, the column-major X^T[cols, rows] with leading dimension cols. So the row-major Y = A @ B is
// computed as the column-major Y^T = B^T @ A^T. A cuBLASLt layout describes a matrix as it is stored
// (before op): rows x cols, column-major, leading dimension ld.
//
//   forward   out[N, OC] = inp[N, C] @ W[OC, C]^T + bias
//             -> out^T[OC, N] = W[OC, C] @ inp^T[C, N]:   m = OC, n = N, k = C
//             A = W,   stored as the column-major W^T[C, OC] (ld C), op T  -> [OC, C]
//             B = inp, stored as the column-major inp^T[C, N] (ld C), op N -> [C, N]
//             D = out, stored as the column-major out^T[OC, N] (ld OC);  beta = 0
//             bias: CUBLASLT_EPILOGUE_BIAS adds bias[i] to row i of D (OC rows = the output features),
//             broadcast over the N columns, in fp32 before the rounding.
//   dinp      dinp[N, C] = dout[N, OC] @ W[OC, C]
//             -> dinp^T[C, N] = W^T[C, OC] @ dout^T[OC, N]: m = C, n = N, k = OC
//             A = W (ld C), op N;  B = dout, stored as dout^T[OC, N] (ld OC), op N;  D = dinp^T (ld C);  beta = 0
//   dweight   dweight[OC, C] += dout^T @ inp
//             -> dweight^T[C, OC] += inp^T[C, N] @ dout[N, OC]: m = C, n = OC, k = N
//             A = inp (ld C), op N;  B = dout, stored as dout^T[OC, N] (ld OC), op T -> [N, OC];
//             C = D = dweight^T[C, OC] (ld C), in place, beta = 1: the old value is widened and added in
//             fp32 and the sum rounded once.
//   dbias     dbias[OC] += sum over the N rows of dout: a small reduction kernel below. cuBLASLt's
//             CUBLASLT_EPILOGUE_BGRADB on the dweight GEMM would compute the same column sum, but it
//             OVERWRITES the bias gradient (in the 16-bit output type) instead of accumulating, so
//             accumulating through it would take a scratch vector and a second rounding.
//
// Sizes: m, n and k need not be multiples of 8. Each pointer's actual alignment (2 to 256 bytes) is
// passed to the heuristic (CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_*), which then only offers algorithms
// that can load from it: 16-byte aligned pointers and leading dimensions that are multiples of 8
// elements get the fast vectorized tensor-core kernels, the rest slower ones. Every dimension must be
// at least 2 (unless N or OC is 0: nothing to do): cuBLASLt's heuristic has been seen to reject a
// matrix with a single row or column with CUBLAS_STATUS_INVALID_VALUE (PyTorch keeps such shapes off
// cuBLASLt for that reason), so such shapes are refused up front with std::invalid_argument, as is a
// configuration for which the heuristic finds no algorithm.
//
// Handle, workspace and algorithm cache: one cuBLASLt handle per (thread, device), like the cuBLAS
// handle of matmul.cu, created on first use and destroyed at thread exit. The stream is an argument of
// every cublasLtMatmul (nothing is bound to the handle). The algorithm for a shape is chosen once by
// cublasLtMatmulAlgoGetHeuristic (best fit) and kept in a small per-handle map keyed by the GEMM, its
// shape, the dtype and the pointers' alignments.
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cuda/cublas_handle.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_utils.cuh"
#include "kernels/matmul16.h"

namespace trainmem::kernels::cuda {

namespace {

// cuBLASLt's scratch for split-K partial sums and the like, per (thread, device, stream): 32 MiB is
// what cuBLAS itself reserves on Hopper. Allocated lazily, once, with cudaMalloc: kernels/ depends on
// nothing else of trainmem, so it cannot take memory from the caching allocator (common/allocator);
// like cuBLAS's own workspace it is a fixed overhead outside the allocator's statistics. One per
// stream because a GEMM still running on one stream may be using its workspace while a GEMM is queued
// on another; GEMMs on the same stream run in order and share one. (A stream destroyed while its GEMM
// still runs, whose handle value is then reused by a new stream, would share it too: not a pattern
// trainmem has.) The bias-gradient reduction borrows it, in stream order, for its fp32 partial sums.
constexpr std::size_t kWorkspaceBytes = std::size_t{32} << 20;
constexpr std::size_t kMaxCachedAlgos = 1024;  // the cache is cleared when it grows past this

enum class GemmKind : std::uint64_t { forward, dinp, dweight };

// The GEMM, dtype, m, n, k, whether there is a bias, and the alignments of A, B, C, D and bias.
using AlgoKey = std::array<std::uint64_t, 11>;

struct DeviceContext {
  cublasLtHandle_t handle = nullptr;
  std::map<cudaStream_t, void*> workspaces;
  std::map<AlgoKey, cublasLtMatmulAlgo_t> algos;
};

// This thread's context for the current device (handle created on first use). Destroyed at thread
// exit, which for the main thread comes before the CUDA runtime's own teardown.
DeviceContext& device_context() {
  struct Contexts {
    std::vector<DeviceContext> by_device;
    Contexts() = default;
    Contexts(const Contexts&) = delete;
    Contexts& operator=(const Contexts&) = delete;
    ~Contexts() {
      // Statuses ignored: nothing useful to do with them at exit.
      for (DeviceContext& context : by_device) {
        for (const auto& entry : context.workspaces) cudaFree(entry.second);
        if (context.handle) cublasLtDestroy(context.handle);
      }
    }
  };
  thread_local Contexts contexts;
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  const auto index = static_cast<std::size_t>(device);
  if (index >= contexts.by_device.size()) contexts.by_device.resize(index + 1);
  DeviceContext& context = contexts.by_device[index];
  if (!context.handle) {
    cublasLtHandle_t created = nullptr;
    CUBLAS_CHECK(cublasLtCreate(&created));
    context.handle = created;
  }
  return context;
}

void* workspace_for(DeviceContext& context, cudaStream_t stream) {
  const auto found = context.workspaces.find(stream);
  if (found != context.workspaces.end()) return found->second;
  void* workspace = nullptr;
  CUDA_CHECK(cudaMalloc(&workspace, kWorkspaceBytes));
  context.workspaces.emplace(stream, workspace);
  return workspace;
}

// The largest power of two (at most 256, the heuristic's default assumption) dividing the address.
std::uint32_t alignment_of(const void* pointer) {
  const auto address = reinterpret_cast<std::uintptr_t>(pointer);
  std::uint32_t alignment = 256;
  while (alignment > 1 && address % alignment != 0) alignment /= 2;
  return alignment;
}

cudaDataType_t data_type(Half16 dtype) { return dtype == Half16::bf16 ? CUDA_R_16BF : CUDA_R_16F; }
const char* dtype_name(Half16 dtype) { return dtype == Half16::bf16 ? "bf16" : "fp16"; }

// RAII for the three cuBLASLt descriptor kinds (host objects, created per call: cheap).
class MatmulDesc {
 public:
  MatmulDesc() { CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc_, CUBLAS_COMPUTE_32F, CUDA_R_32F)); }
  MatmulDesc(const MatmulDesc&) = delete;
  MatmulDesc& operator=(const MatmulDesc&) = delete;
  ~MatmulDesc() { cublasLtMatmulDescDestroy(desc_); }
  cublasLtMatmulDesc_t get() const { return desc_; }
  template <typename T>
  void set(cublasLtMatmulDescAttributes_t attribute, const T& value) {
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc_, attribute, &value, sizeof(value)));
  }

 private:
  cublasLtMatmulDesc_t desc_ = nullptr;
};

class Layout {
 public:
  Layout(cudaDataType_t type, std::uint64_t rows, std::uint64_t cols, std::int64_t ld) {
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&layout_, type, rows, cols, ld));
  }
  Layout(const Layout&) = delete;
  Layout& operator=(const Layout&) = delete;
  ~Layout() { cublasLtMatrixLayoutDestroy(layout_); }
  cublasLtMatrixLayout_t get() const { return layout_; }

 private:
  cublasLtMatrixLayout_t layout_ = nullptr;
};

class Preference {
 public:
  Preference() { CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref_)); }
  Preference(const Preference&) = delete;
  Preference& operator=(const Preference&) = delete;
  ~Preference() { cublasLtMatmulPreferenceDestroy(pref_); }
  cublasLtMatmulPreference_t get() const { return pref_; }
  template <typename T>
  void set(cublasLtMatmulPreferenceAttributes_t attribute, const T& value) {
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref_, attribute, &value, sizeof(value)));
  }

 private:
  cublasLtMatmulPreference_t pref_ = nullptr;
};

// One column-major GEMM  D[m, n] = op(A)[m, k] @ op(B)[k, n] + beta * D (+ bias[m] broadcast over columns).
// C is D (same pointer, same layout): in place, read only when beta != 0.
struct Gemm {
  GemmKind kind;
  cublasOperation_t trans_a, trans_b;
  std::uint64_t m, n, k;
  const void* a;
  std::int64_t lda;
  const void* b;
  std::int64_t ldb;
  void* d;
  std::int64_t ldd;
  float beta;
  const void* bias;  // nullptr: no epilogue
};

const char* gemm_name(GemmKind kind) {
  switch (kind) {
    case GemmKind::forward:
      return "matmul16_forward";
    case GemmKind::dinp:
      return "matmul16_backward (dinp)";
    case GemmKind::dweight:
      return "matmul16_backward (dweight)";
  }
  return "matmul16";
}

void run_gemm(cudaStream_t stream, Half16 dtype, const Gemm& g) {
  DeviceContext& context = device_context();
  const cudaDataType_t type = data_type(dtype);

  MatmulDesc desc;
  desc.set(CUBLASLT_MATMUL_DESC_TRANSA, static_cast<std::int32_t>(g.trans_a));
  desc.set(CUBLASLT_MATMUL_DESC_TRANSB, static_cast<std::int32_t>(g.trans_b));
  if (g.bias) {
    desc.set(CUBLASLT_MATMUL_DESC_EPILOGUE, static_cast<std::uint32_t>(CUBLASLT_EPILOGUE_BIAS));
    desc.set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, g.bias);  // also read by the heuristic, for its alignment
    desc.set(CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, static_cast<std::int32_t>(type));
  }
  // Layouts of the matrices as stored (before op).
  const bool ta = g.trans_a != CUBLAS_OP_N, tb = g.trans_b != CUBLAS_OP_N;
  const Layout layout_a(type, ta ? g.k : g.m, ta ? g.m : g.k, g.lda);
  const Layout layout_b(type, tb ? g.n : g.k, tb ? g.k : g.n, g.ldb);
  const Layout layout_d(type, g.m, g.n, g.ldd);

  const std::uint32_t align_a = alignment_of(g.a), align_b = alignment_of(g.b), align_d = alignment_of(g.d);
  const std::uint32_t align_bias = g.bias ? alignment_of(g.bias) : 0;
  const AlgoKey key{static_cast<std::uint64_t>(g.kind), static_cast<std::uint64_t>(dtype), g.m, g.n, g.k,
                    g.bias ? 1u : 0u, align_a, align_b, align_d, align_d, align_bias};
  auto found = context.algos.find(key);
  if (found == context.algos.end()) {
    Preference preference;
    preference.set(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, static_cast<std::uint64_t>(kWorkspaceBytes));
    preference.set(CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK,
                   static_cast<std::uint32_t>(CUBLASLT_REDUCTION_SCHEME_NONE | CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE));
    preference.set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, align_a);
    preference.set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, align_b);
    preference.set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, align_d);
    preference.set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, align_d);
    cublasLtMatmulHeuristicResult_t result{};
    int count = 0;
    const cublasStatus_t status =
        cublasLtMatmulAlgoGetHeuristic(context.handle, desc.get(), layout_a.get(), layout_b.get(), layout_d.get(),
                                       layout_d.get(), preference.get(), 1, &result, &count);
    if (status == CUBLAS_STATUS_NOT_SUPPORTED || (status == CUBLAS_STATUS_SUCCESS && count == 0))
      throw std::invalid_argument(
          std::string(gemm_name(g.kind)) + ": cuBLASLt has no algorithm for this " + dtype_name(dtype) +
          " GEMM (column-major m=" + std::to_string(g.m) + " n=" + std::to_string(g.n) + " k=" + std::to_string(g.k) +
          (g.bias ? ", bias epilogue" : "") + "; pointer alignments A " + std::to_string(align_a) + " B " +
          std::to_string(align_b) + " D " + std::to_string(align_d) + " bytes)");
    CUBLAS_CHECK(status);
    if (context.algos.size() >= kMaxCachedAlgos) context.algos.clear();
    found = context.algos.emplace(key, result.algo).first;
  }

  const float alpha = 1.0f;
  CUBLAS_CHECK(cublasLtMatmul(context.handle, desc.get(), &alpha, g.a, layout_a.get(), g.b, layout_b.get(), &g.beta,
                              g.d, layout_d.get(), g.d, layout_d.get(), &found->second,
                              workspace_for(context, stream), kWorkspaceBytes, stream));
}

// Refuses the shapes this kernel does not run (see the top of the file); false: nothing to do.
bool check_shape(const char* what, std::size_t N, std::size_t C, std::size_t OC) {
  if (N == 0 || OC == 0) return false;
  if (N < 2 || C < 2 || OC < 2)
    throw std::invalid_argument(std::string(what) + ": N=" + std::to_string(N) + " C=" + std::to_string(C) +
                                " OC=" + std::to_string(OC) +
                                ": every dimension must be at least 2 (cuBLASLt rejects a matrix with a single row "
                                "or column), or N or OC 0 for nothing to do");
  detail::cublas_int(N, what);  // sizes beyond int are untested with cuBLASLt: refused as by matmul.cu
  detail::cublas_int(C, what);
  detail::cublas_int(OC, what);
  return true;
}

// ------------------------------------------------------------------------------------------ dbias

constexpr unsigned kBiasCols = 32;               // columns per block: one warp reads 32 adjacent elements of a row
constexpr unsigned kBiasRowLanes = 8;            // row lanes per block (block = 32 x 8 threads)
constexpr std::size_t kBiasRowsPerSplit = 512;   // rows per block along y, aimed at (64 per lane) ...
constexpr std::size_t kBiasMaxSplits = 1024;     // ... with at most this many blocks along y
constexpr unsigned kBlock = 256;

template <Half16 kType>
__device__ __forceinline__ float widen(std::uint16_t x) {
  if constexpr (kType == Half16::bf16) {
    return __bfloat162float(__ushort_as_bfloat16(x));
  } else {
    return __half2float(__ushort_as_half(x));
  }
}

template <Half16 kType>
__device__ __forceinline__ std::uint16_t round16(float x) {
  if constexpr (kType == Half16::bf16) {
    return __bfloat16_as_ushort(__float2bfloat16_rn(x));
  } else {
    return __half_as_ushort(__float2half_rn(x));
  }
}

// Column sums of dout[N, OC] over a band of rows, in fp32.
// Block (32 x 8): threadIdx.x -> column o = blockIdx.x * 32 + threadIdx.x (coalesced reads along a
// row); blockIdx.y -> rows [blockIdx.y * rows_per_split, + rows_per_split), which threadIdx.y walks
// with step 8. The 8 lane sums of a column are added through shared memory in a fixed order, so the
// result does not depend on scheduling. kFinal (a single band, gridDim.y == 1): the column's sum is
// added to dbias[o] and rounded once. Otherwise it goes to partial[blockIdx.y * OC + o] for
// bias_grad_finish_kernel.
template <Half16 kType, bool kFinal>
__global__ void bias_grad_kernel(std::uint16_t* dbias, float* partial, const std::uint16_t* dout, std::size_t N,
                                 std::size_t OC, std::size_t rows_per_split) {
  __shared__ float lanes[kBiasRowLanes][kBiasCols];
  const std::size_t o = static_cast<std::size_t>(blockIdx.x) * kBiasCols + threadIdx.x;
  const std::size_t row_begin = static_cast<std::size_t>(blockIdx.y) * rows_per_split;
  const std::size_t row_end = row_begin + rows_per_split < N ? row_begin + rows_per_split : N;
  float sum = 0.0f;
  if (o < OC)
    for (std::size_t n = row_begin + threadIdx.y; n < row_end; n += kBiasRowLanes)
      sum += widen<kType>(dout[n * OC + o]);
  lanes[threadIdx.y][threadIdx.x] = sum;  // every thread reaches the barrier
  __syncthreads();
  if (threadIdx.y == 0 && o < OC) {
    for (unsigned y = 1; y < kBiasRowLanes; ++y) sum += lanes[y][threadIdx.x];
    if constexpr (kFinal) {
      dbias[o] = round16<kType>(widen<kType>(dbias[o]) + sum);
    } else {
      partial[static_cast<std::size_t>(blockIdx.y) * OC + o] = sum;
    }
  }
}

// dbias[o] = round(dbias[o] + sum over the splits of partial[s * OC + o]), the splits in order.
// Thread i -> column o = i (grid-stride).
template <Half16 kType>
__global__ void bias_grad_finish_kernel(std::uint16_t* dbias, const float* partial, std::size_t splits,
                                        std::size_t OC) {
  for (std::size_t o = detail::global_thread_index(); o < OC; o += detail::grid_stride()) {
    float sum = 0.0f;
    for (std::size_t s = 0; s < splits; ++s) sum += partial[s * OC + o];
    dbias[o] = round16<kType>(widen<kType>(dbias[o]) + sum);
  }
}

template <Half16 kType>
void bias_grad(cudaStream_t stream, std::uint16_t* dbias, const std::uint16_t* dout, std::size_t N, std::size_t OC) {
  const unsigned col_blocks = detail::exact_grid(OC, kBiasCols, "matmul16_backward dbias");
  const dim3 block(kBiasCols, kBiasRowLanes);
  // Bands of rows: enough blocks to fill the GPU when OC is small, bounded by the fp32 partial sums
  // that fit the workspace (OC floats per band).
  std::size_t splits = std::min((N + kBiasRowsPerSplit - 1) / kBiasRowsPerSplit, kBiasMaxSplits);
  splits = std::min(splits, kWorkspaceBytes / (OC * sizeof(float)));
  if (splits <= 1) {
    bias_grad_kernel<kType, true><<<dim3(col_blocks, 1), block, 0, stream>>>(dbias, nullptr, dout, N, OC, N);
    CUDA_CHECK_LAUNCH("bias_grad_kernel");
    return;
  }
  const std::size_t rows_per_split = (N + splits - 1) / splits;
  splits = (N + rows_per_split - 1) / rows_per_split;  // no empty band at the end
  auto* partial = static_cast<float*>(workspace_for(device_context(), stream));
  bias_grad_kernel<kType, false><<<dim3(col_blocks, static_cast<unsigned>(splits)), block, 0, stream>>>(
      nullptr, partial, dout, N, OC, rows_per_split);
  CUDA_CHECK_LAUNCH("bias_grad_kernel");
  bias_grad_finish_kernel<kType><<<detail::grid_for(OC, kBlock), kBlock, 0, stream>>>(dbias, partial, splits, OC);
  CUDA_CHECK_LAUNCH("bias_grad_finish_kernel");
}

}  // namespace

void matmul16_forward(void* stream, Half16 dtype, std::uint16_t* out, const std::uint16_t* inp,
                      const std::uint16_t* weight, const std::uint16_t* bias, std::size_t N, std::size_t C,
                      std::size_t OC) {
  if (!check_shape("matmul16_forward", N, C, OC)) return;
  // out^T[OC, N] = (W^T[C, OC])^T @ inp^T[C, N]  (+ bias over the OC rows)
  run_gemm(detail::as_stream(stream), dtype,
           Gemm{GemmKind::forward, CUBLAS_OP_T, CUBLAS_OP_N, OC, N, C, weight, static_cast<std::int64_t>(C), inp,
                static_cast<std::int64_t>(C), out, static_cast<std::int64_t>(OC), 0.0f, bias});
}

void matmul16_backward(void* stream, Half16 dtype, std::uint16_t* dinp, std::uint16_t* dweight, std::uint16_t* dbias,
                       const std::uint16_t* dout, const std::uint16_t* inp, const std::uint16_t* weight, std::size_t N,
                       std::size_t C, std::size_t OC) {
  if (!check_shape("matmul16_backward", N, C, OC)) return;
  const cudaStream_t s = detail::as_stream(stream);
  const auto c = static_cast<std::int64_t>(C), oc = static_cast<std::int64_t>(OC);
  // dinp^T[C, N] = W^T[C, OC] @ dout^T[OC, N]                 (written: beta = 0, dinp is never read)
  if (dinp)
    run_gemm(s, dtype,
             Gemm{GemmKind::dinp, CUBLAS_OP_N, CUBLAS_OP_N, C, N, OC, weight, c, dout, oc, dinp, c, 0.0f, nullptr});
  // dweight^T[C, OC] += inp^T[C, N] @ (dout^T[OC, N])^T      (accumulated: beta = 1, C = D in place)
  run_gemm(s, dtype,
           Gemm{GemmKind::dweight, CUBLAS_OP_N, CUBLAS_OP_T, C, OC, N, inp, c, dout, oc, dweight, c, 1.0f, nullptr});
  if (dbias) {
    if (dtype == Half16::bf16) {
      bias_grad<Half16::bf16>(s, dbias, dout, N, OC);
    } else {
      bias_grad<Half16::fp16>(s, dbias, dout, N, OC);
    }
  }
}

}  // namespace trainmem::kernels::cuda
