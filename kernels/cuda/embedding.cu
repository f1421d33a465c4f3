// CUDA: token + position embedding, forward and backward (formulas in embedding.h; the CPU reference
// is cpu/embedding.cpp). Tokens must lie in [0, V): they index wte's rows unchecked, as on the CPU.
// Every kernel is a template over the element type D of the tables and activations (float,
// __nv_bfloat16, __half; dtype.cuh): loads widen to float, sums are float, each output is rounded
// once.
//
// dwte's backward, O(B*T*C) and deterministic, in the CPU's order (bit for bit the CPU's result):
//   1. sort the positions by token with a stable LSD radix sort (4 passes of 8-bit digits over
//      the 32-bit token; each pass: per-tile digit counts, one exclusive scan of the counts in
//      digit-major order, a stable scatter), so each token's positions stay in increasing order;
//   2. one block per run of equal tokens (per column tile) starts from the dwte row's old value,
//      adds the run's dout rows in position order in fp32, and rounds once.
// Integer counts only, no float atomics: every run gives the same bits.
#include <cub/block/block_scan.cuh>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>

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
    out[i] = wpe == nullptr ? wte[token * C + c]  // no position table (Llama: RoPE): the token row, copied
                            : detail::from_float<D>(detail::to_float(wte[token * C + c]) + detail::to_float(wpe[t * C + c]));
  }
}

// ---- 1. the stable radix sort of the positions by token

constexpr unsigned kTile = kEmbeddingSortTile;      // positions per block of the sort passes
constexpr unsigned kDigits = kEmbeddingSortDigits;  // 8-bit digits
constexpr unsigned kDigitBits = 8;
constexpr unsigned kScanBlock = 1024;  // threads of the single-block scan
static_assert(kTile == kDigits, "the count and scatter kernels give each thread one element and one digit");

// keys[p] = tokens[p] (as unsigned: valid tokens are >= 0), positions[p] = p.
__global__ void sort_init_kernel(std::uint32_t* keys, std::uint32_t* positions, const std::int32_t* tokens,
                                 std::size_t n) {
  for (std::size_t p = detail::global_thread_index(); p < n; p += detail::grid_stride()) {
    keys[p] = static_cast<std::uint32_t>(tokens[p]);
    positions[p] = static_cast<std::uint32_t>(p);  // n < 2^32, checked on the host
  }
}

// Block -> tile t = blockIdx.x (elements t*256 .. t*256+255, clipped to n); thread -> one element.
// counts[d * tiles + t] = how many of the tile's keys have digit d (every digit written, 0 too).
// Digit-major, so that one exclusive scan of counts gives, for each (digit, tile), where the
// tile's first element of that digit goes: after all smaller digits, and after the same digit
// in earlier tiles.
__global__ void digit_count_kernel(std::uint32_t* counts, const std::uint32_t* keys, std::size_t n, unsigned shift) {
  __shared__ std::uint32_t tile_counts[kDigits];
  const std::size_t tiles = gridDim.x;
  tile_counts[threadIdx.x] = 0;  // blockDim.x == kDigits == kTile
  __syncthreads();
  const std::size_t i = static_cast<std::size_t>(blockIdx.x) * kTile + threadIdx.x;
  if (i < n) atomicAdd(&tile_counts[(keys[i] >> shift) & (kDigits - 1)], 1u);  // integer: order-free
  __syncthreads();
  counts[threadIdx.x * tiles + blockIdx.x] = tile_counts[threadIdx.x];
}

// In place over counts[0, len): the exclusive prefix sum. One block of 1024 threads: thread j
// owns the contiguous chunk [j*chunk, (j+1)*chunk); it sums its chunk, the block scans the 1024
// chunk sums (cub::BlockScan), and the thread rewrites its chunk from its chunk's offset. The
// total is n < 2^32: 32-bit sums do not overflow.
__global__ void exclusive_scan_kernel(std::uint32_t* counts, std::size_t len) {
  using BlockScan = cub::BlockScan<std::uint32_t, kScanBlock>;
  __shared__ typename BlockScan::TempStorage scan_storage;
  const std::size_t chunk = (len + kScanBlock - 1) / kScanBlock;
  const std::size_t begin = threadIdx.x * chunk < len ? threadIdx.x * chunk : len;
  const std::size_t end = begin + chunk < len ? begin + chunk : len;
  std::uint32_t sum = 0;
  for (std::size_t k = begin; k < end; ++k) sum += counts[k];
  std::uint32_t offset = 0;
  BlockScan(scan_storage).ExclusiveSum(sum, offset);
  for (std::size_t k = begin; k < end; ++k) {
    const std::uint32_t count = counts[k];
    counts[k] = offset;
    offset += count;
  }
}

// Block -> tile t (as digit_count_kernel); thread i -> element t*256 + i. Its rank among the
// tile's elements of the same digit is the number of EARLIER elements of the tile with that digit
// (a scan of the tile's digits in shared memory), so equal digits keep their order: stable.
// Element goes to offsets[d * tiles + t] + rank, with its key and its position.
__global__ void digit_scatter_kernel(std::uint32_t* keys_out, std::uint32_t* positions_out,
                                     const std::uint32_t* keys_in, const std::uint32_t* positions_in,
                                     const std::uint32_t* offsets, std::size_t n, unsigned shift) {
  __shared__ unsigned tile_digits[kTile];
  const std::size_t tiles = gridDim.x;
  const std::size_t i = static_cast<std::size_t>(blockIdx.x) * kTile + threadIdx.x;
  const bool valid = i < n;
  const std::uint32_t key = valid ? keys_in[i] : 0;
  const unsigned digit = (key >> shift) & (kDigits - 1);
  tile_digits[threadIdx.x] = valid ? digit : kDigits;  // kDigits: no element (matches no digit)
  __syncthreads();
  if (!valid) return;
  unsigned rank = 0;
  for (unsigned j = 0; j < threadIdx.x; ++j) rank += tile_digits[j] == digit ? 1u : 0u;
  const std::size_t dst = static_cast<std::size_t>(offsets[digit * tiles + blockIdx.x]) + rank;
  keys_out[dst] = key;
  positions_out[dst] = positions_in[i];
}

// ---- 2. one block per run of equal tokens

// dwte[token, c] += sum over the run's positions p (in increasing order) of dout[p, c].
// Block -> sorted index head = blockIdx.x and columns c = blockIdx.y * 256 + threadIdx.x. Only the
// block at the FIRST index of a run works (its key differs from the one before); the others leave
// at once, the whole block together. The run's end: the sorted keys of one token are contiguous,
// so in each window of 256 indices after the head the ones still equal to the token are a prefix
// of the window; the block counts them (__syncthreads_count, the same for every thread) until a
// window is not full. Then each thread sums its column from the row's old value and rounds once.
template <typename D>
__global__ void embedding_backward_wte_kernel(D* dwte, const D* dout, const std::uint32_t* sorted_tokens,
                                              const std::uint32_t* sorted_positions, std::size_t n, std::size_t C) {
  const std::size_t head = blockIdx.x;
  const std::uint32_t token = sorted_tokens[head];
  if (head > 0 && sorted_tokens[head - 1] == token) return;  // not a run's first index: the whole block leaves
  std::size_t end = head + 1;
  for (;;) {
    const std::size_t j = end + threadIdx.x;
    const int same = __syncthreads_count(j < n && sorted_tokens[j] == token);
    end += static_cast<std::size_t>(same);
    if (same < static_cast<int>(blockDim.x)) break;  // block-uniform: every thread leaves the loop together
  }
  const std::size_t c = static_cast<std::size_t>(blockIdx.y) * blockDim.x + threadIdx.x;
  if (c >= C) return;
  D* row = dwte + static_cast<std::size_t>(token) * C;
  float acc = detail::to_float(row[c]);
  for (std::size_t k = head; k < end; ++k)
    acc += detail::to_float(dout[static_cast<std::size_t>(sorted_positions[k]) * C + c]);
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
void embedding_backward(void* stream, Out<T> dwte, Out<T> dwpe, In<T> dout, const std::int32_t* tokens,
                        void* workspace, std::size_t B, std::size_t Tn, std::size_t C) {
  if (B == 0 || Tn == 0 || C == 0) return;
  const std::size_t n = B * Tn;
  if (n > std::numeric_limits<std::uint32_t>::max())
    throw std::invalid_argument("embedding_backward: " + std::to_string(n) +
                                " positions (B*T) do not fit the sort's 32-bit positions: use a smaller batch");
  if (workspace == nullptr || reinterpret_cast<std::uintptr_t>(workspace) % alignof(std::uint32_t) != 0)
    throw std::invalid_argument("embedding_backward: the workspace must be embedding_backward_workspace_bytes(B*T) = " +
                                std::to_string(embedding_backward_workspace_bytes(n)) +
                                " bytes, 4-byte aligned (got " + (workspace ? "a misaligned" : "a null") + " pointer)");
  const cudaStream_t s = detail::as_stream(stream);
  // The workspace, as embedding_backward_workspace_bytes lays it out.
  const std::size_t tiles = (n + kTile - 1) / kTile;
  std::uint32_t* keys[2] = {static_cast<std::uint32_t*>(workspace), static_cast<std::uint32_t*>(workspace) + n};
  std::uint32_t* positions[2] = {keys[1] + n, keys[1] + 2 * n};
  std::uint32_t* counts = keys[1] + 3 * n;  // kDigits * tiles

  sort_init_kernel<<<detail::grid_for(n, kBlock), kBlock, 0, s>>>(keys[0], positions[0], tokens, n);
  CUDA_CHECK_LAUNCH("sort_init_kernel");
  const unsigned tile_grid = detail::exact_grid(n, kTile, "embedding_backward sort tiles");
  for (unsigned pass = 0; pass < 32 / kDigitBits; ++pass) {  // 4 passes: in 0 -> 1 -> 0 -> 1 -> 0
    const unsigned shift = pass * kDigitBits;
    const unsigned in = pass % 2, out = 1 - in;
    digit_count_kernel<<<tile_grid, kTile, 0, s>>>(counts, keys[in], n, shift);
    CUDA_CHECK_LAUNCH("digit_count_kernel");
    exclusive_scan_kernel<<<1, kScanBlock, 0, s>>>(counts, kDigits * tiles);
    CUDA_CHECK_LAUNCH("exclusive_scan_kernel");
    digit_scatter_kernel<<<tile_grid, kTile, 0, s>>>(keys[out], positions[out], keys[in], positions[in], counts, n,
                                                     shift);
    CUDA_CHECK_LAUNCH("digit_scatter_kernel");
  }
  // An even number of passes: the sorted keys and positions are back in keys[0], positions[0].
  const dim3 grid(detail::exact_grid(n, 1, "embedding_backward positions"),
                  detail::exact_grid(C, kBlock, "embedding_backward columns"));
  embedding_backward_wte_kernel<<<grid, kBlock, 0, s>>>(detail::device_cast(dwte), detail::device_cast(dout), keys[0],
                                                        positions[0], n, C);
  CUDA_CHECK_LAUNCH("embedding_backward_wte_kernel");
  if (dwpe == nullptr) return;  // no position table
  embedding_backward_wpe_kernel<<<detail::grid_for(Tn * C, kBlock), kBlock, 0, s>>>(detail::device_cast(dwpe),
                                                                                   detail::device_cast(dout), B, Tn, C);
  CUDA_CHECK_LAUNCH("embedding_backward_wpe_kernel");
}

#define TRAINMEM_INSTANTIATE(T)                                                                                      \
  template void embedding_forward<T>(void*, Out<T>, const std::int32_t*, In<T>, In<T>, std::size_t, std::size_t,    \
                                     std::size_t);                                                                   \
  template void embedding_backward<T>(void*, Out<T>, Out<T>, In<T>, const std::int32_t*, void*, std::size_t,      \
                                      std::size_t, std::size_t);
TRAINMEM_INSTANTIATE(float)
TRAINMEM_INSTANTIATE(bf16)
TRAINMEM_INSTANTIATE(fp16)
#undef TRAINMEM_INSTANTIATE

}  // namespace trainmem::kernels::cuda
