// CUDA: the linear layer on cuBLAS, fp32 with TF32 off (formulas in matmul.h; the CPU reference is
// cpu/matmul.cpp), and the cuBLAS handle the other CUDA kernels share.
//
// Row-major on a column-major library: a row-major matrix X[rows, cols] is, in the same memory, the
// column-major matrix X^T[cols, rows] with leading dimension cols. So a row-major product
// Y = A @ B is computed as the column-major product Y^T = B^T @ A^T, swapping the operands:
//   out[N, OC] = inp[N, C] @ W[OC, C]^T    ->  out^T[OC, N] = W[OC, C] @ inp^T[C, N]
//       W's memory is the column-major W^T[C, OC], so it enters transposed: gemm(T, N; m=OC, n=N, k=C)
//   dinp[N, C] = dout[N, OC] @ W[OC, C]    ->  dinp^T[C, N] = W^T[C, OC] @ dout^T[OC, N]: gemm(N, N; C, N, OC)
//   dweight[OC, C] += dout^T @ inp         ->  dweight^T[C, OC] += inp^T[C, N] @ dout[N, OC]: gemm(N, T; C, OC, N),
//       beta = 1 (dout's memory is dout^T[OC, N], so it enters transposed)
// The bias add and the bias gradient (a column sum) are small kernels of their own.
#include <cublas_v2.h>

#include <climits>
#include <cstddef>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cuda/cublas_handle.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_utils.cuh"
#include "kernels/matmul.h"

namespace trainmem::kernels::cuda {

namespace detail {

cublasHandle_t cublas_handle(void* stream) {
  // One handle per (thread, device): a cuBLAS handle belongs to the device current when it was
  // created, and must not be used by two host threads at once. Destroyed at thread exit, which
  // for the main thread comes before the CUDA runtime's own teardown.
  struct Handles {
    std::vector<cublasHandle_t> by_device;
    Handles() = default;
    Handles(const Handles&) = delete;
    Handles& operator=(const Handles&) = delete;
    ~Handles() {
      for (cublasHandle_t h : by_device)
        if (h) cublasDestroy(h);  // status ignored: nothing useful to do with it at exit
    }
  };
  thread_local Handles handles;
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  const auto index = static_cast<std::size_t>(device);
  if (index >= handles.by_device.size()) handles.by_device.resize(index + 1, nullptr);
  cublasHandle_t& handle = handles.by_device[index];
  if (!handle) {
    cublasHandle_t created = nullptr;
    CUBLAS_CHECK(cublasCreate(&created));
    handle = created;
    CUBLAS_CHECK(cublasSetMathMode(handle, CUBLAS_DEFAULT_MATH));  // no TF32: fp32 products as the CPU's
  }
  CUBLAS_CHECK(cublasSetStream(handle, as_stream(stream)));
  return handle;
}

int cublas_int(std::size_t n, const char* what) {
  if (n > static_cast<std::size_t>(INT_MAX))
    throw std::invalid_argument(std::string(what) + ": size " + std::to_string(n) + " exceeds cuBLAS's int range");
  return static_cast<int>(n);
}

}  // namespace detail

namespace {

constexpr unsigned kBlock = 256;
constexpr unsigned kColTile = 32;             // columns per block of the bias-gradient reduction
constexpr unsigned kRowLanes = 8;             // row lanes per block of that reduction
constexpr std::size_t kRowsPerColBlock = 64;  // rows per block aimed at ...
constexpr unsigned kMaxColBlocksY = 256;      // ... with at most this many blocks along the rows

// out[n, o] += bias[o] for every row n.   Thread i -> element i = n * OC + o of out (grid-stride).
__global__ void add_bias_kernel(float* out, const float* bias, std::size_t N, std::size_t OC) {
  const std::size_t total = N * OC;
  for (std::size_t i = detail::global_thread_index(); i < total; i += detail::grid_stride()) out[i] += bias[i % OC];
}

// dbias[o] += sum_n dout[n, o]  (a column sum, accumulated).
// Block (32 x 8): threadIdx.x -> column o = blockIdx.x * 32 + threadIdx.x (coalesced reads along a
// row); threadIdx.y -> rows blockIdx.y * 8 + threadIdx.y, stepping by gridDim.y * 8. The 8 partials
// of a column are summed through shared memory and one thread per column atomically adds the
// block's sum into dbias.
__global__ void bias_grad_kernel(float* dbias, const float* dout, std::size_t N, std::size_t OC) {
  __shared__ float partial[kRowLanes][kColTile];
  const std::size_t o = static_cast<std::size_t>(blockIdx.x) * kColTile + threadIdx.x;
  float sum = 0.0f;
  if (o < OC)
    for (std::size_t n = static_cast<std::size_t>(blockIdx.y) * kRowLanes + threadIdx.y; n < N;
         n += static_cast<std::size_t>(gridDim.y) * kRowLanes)
      sum += dout[n * OC + o];
  partial[threadIdx.y][threadIdx.x] = sum;  // every thread reaches the barrier
  __syncthreads();
  if (threadIdx.y == 0 && o < OC) {
    for (unsigned y = 1; y < kRowLanes; ++y) sum += partial[y][threadIdx.x];
    atomicAdd(dbias + o, sum);
  }
}

}  // namespace

void matmul_forward(void* stream, float* out, const float* inp, const float* weight, const float* bias, std::size_t N,
                    std::size_t C, std::size_t OC) {
  if (N == 0 || C == 0 || OC == 0) return;
  const int n = detail::cublas_int(N, "matmul_forward N");
  const int c = detail::cublas_int(C, "matmul_forward C");
  const int oc = detail::cublas_int(OC, "matmul_forward OC");
  cublasHandle_t handle = detail::cublas_handle(stream);
  const float one = 1.0f, zero = 0.0f;
  // out^T[OC, N] = (W^T[C, OC])^T @ inp^T[C, N]
  CUBLAS_CHECK(cublasSgemm(handle, CUBLAS_OP_T, CUBLAS_OP_N, oc, n, c, &one, weight, c, inp, c, &zero, out, oc));
  if (bias) {
    add_bias_kernel<<<detail::grid_for(N * OC, kBlock), kBlock, 0, detail::as_stream(stream)>>>(out, bias, N, OC);
    CUDA_CHECK_LAUNCH("add_bias_kernel");
  }
}

void matmul_backward(void* stream, float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     const float* weight, std::size_t N, std::size_t C, std::size_t OC) {
  if (N == 0 || C == 0 || OC == 0) return;
  const int n = detail::cublas_int(N, "matmul_backward N");
  const int c = detail::cublas_int(C, "matmul_backward C");
  const int oc = detail::cublas_int(OC, "matmul_backward OC");
  cublasHandle_t handle = detail::cublas_handle(stream);
  const float one = 1.0f, zero = 0.0f;
  // dinp^T[C, N] = W^T[C, OC] @ dout^T[OC, N]          (written: beta = 0, dinp is never read)
  if (dinp) CUBLAS_CHECK(cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, c, n, oc, &one, weight, c, dout, oc, &zero, dinp, c));
  // dweight^T[C, OC] += inp^T[C, N] @ (dout^T[OC, N])^T   (accumulated: beta = 1)
  CUBLAS_CHECK(cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_T, c, oc, n, &one, inp, c, dout, oc, &one, dweight, c));
  if (dbias) {
    const dim3 grid(detail::exact_grid(OC, kColTile, "matmul_backward dbias"),
                    detail::grid_for(N, kRowsPerColBlock, kMaxColBlocksY));
    const dim3 block(kColTile, kRowLanes);
    bias_grad_kernel<<<grid, block, 0, detail::as_stream(stream)>>>(dbias, dout, N, OC);
    CUDA_CHECK_LAUNCH("bias_grad_kernel");
  }
}

}  // namespace trainmem::kernels::cuda
