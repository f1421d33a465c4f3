// What one kernel call costs, declared once, beside its dispatcher: the arithmetic it does and the
// bytes it must move through device memory.
//
//   flops  floating-point operations, a multiply-add counted as 2 (the GEMM convention: a
//          [M, K] x [K, N] product is 2 M N K). Elementwise kernels count their arithmetic
//          roughly (a few per element); they are bound by their bytes, not their flops.
//   bytes  every input read once and every output written once, in the storage type (an
//          accumulated output is read and written): the least a kernel can move, as a roofline
//          counts it. Scratch a kernel keeps on chip (flash attention's tiles) is not counted; the
//          B*H*T*T scores the naive attention writes and reads back are.
//
// Every dispatcher (kernels/*.h) opens a KernelCost at its top, before it branches on the backend,
// so the call is declared on every backend -- on the meta device too, where nothing runs. A run
// with a KernelCostLog on its Stream therefore lists its kernels with their costs: on the meta
// device that is the step's kernel list for the price of a meta run (what `trainmem plan` turns
// into time); on the CPU each call also has its measured wall time (the planner's calibration).
#pragma once
#include <chrono>
#include <cstddef>
#include <type_traits>

#include "kernels/dtype.h"
#include "kernels/kernel_stream.h"

namespace trainmem::kernels {

// The kind of work, for a device model's rate: GEMMs run at the matrix units' rate, attention is
// GEMM-like but in small tiles, the rest is bound by memory bandwidth.
enum class KernelClass { gemm, attention, memory };

// The type a kernel stores (and so reads and writes) its tensors in.
enum class KernelDType { f32, bf16, f16, f64 };

template <typename T>
constexpr KernelDType kernel_dtype_of() {
  if constexpr (std::is_same_v<T, bf16>) return KernelDType::bf16;
  else if constexpr (std::is_same_v<T, fp16>) return KernelDType::f16;
  else if constexpr (std::is_same_v<T, double>) return KernelDType::f64;
  else return KernelDType::f32;
}
inline constexpr double element_bytes(KernelDType t) {
  return t == KernelDType::f64 ? 8.0 : t == KernelDType::f32 ? 4.0 : 2.0;
}
inline const char* to_string(KernelDType t) {
  return t == KernelDType::f64 ? "f64" : t == KernelDType::f32 ? "f32" : t == KernelDType::bf16 ? "bf16" : "f16";
}
inline const char* to_string(KernelClass c) {
  return c == KernelClass::gemm ? "gemm" : c == KernelClass::attention ? "attention" : "memory";
}

struct KernelCall {
  const char* name;  // the dispatcher's name: "matmul_forward"
  KernelClass kind;
  KernelDType dtype;
  double flops;
  double bytes;
};

// Where the calls go (common/device/cost_log.h implements it for a run).
class KernelCostLog {
 public:
  virtual ~KernelCostLog() = default;
  // seconds: the call's wall time on the CPU backend (the call runs synchronously there); 0 on
  // the meta device (nothing runs) and on a GPU (the launch returns before the kernel ends).
  virtual void record(const KernelCall& call, double seconds) = 0;
};

// Declares one call to the Stream's log (if it has one) when it goes out of scope, timed on the CPU.
class KernelCost {
 public:
  KernelCost(const Stream& s, const KernelCall& call)
      : log_(s.costs), call_(call), timed_(s.costs != nullptr && s.backend == Backend::cpu) {
    if (timed_) start_ = Clock::now();
  }
  ~KernelCost() {
    if (log_ == nullptr) return;
    const double seconds = timed_ ? std::chrono::duration<double>(Clock::now() - start_).count() : 0.0;
    log_->record(call_, seconds);
  }
  KernelCost(const KernelCost&) = delete;
  KernelCost& operator=(const KernelCost&) = delete;

 private:
  using Clock = std::chrono::steady_clock;
  KernelCostLog* log_;
  KernelCall call_;
  bool timed_;
  Clock::time_point start_{};
};

// The costs of the common shapes, each formula once.
// A GEMM out[M, N] (+)= A[M, K] B[K, N]: 2 M N K flops; reads A and B, writes out (and reads it
// when it accumulates).
template <typename T>
KernelCall gemm_call(const char* name, double M, double N, double K, bool accumulates = false) {
  const double e = element_bytes(kernel_dtype_of<T>());
  return {name, KernelClass::gemm, kernel_dtype_of<T>(), 2.0 * M * N * K,
          e * (M * K + K * N + M * N * (accumulates ? 2.0 : 1.0))};
}
// An elementwise or row-wise kernel over n elements of storage type T: `reads` and `writes` tensors
// of n elements each (plus `extra_bytes` of small side tensors), `flops_per_element` arithmetic.
template <typename T>
KernelCall memory_call(const char* name, double n, double reads, double writes, double flops_per_element,
                       double extra_bytes = 0) {
  return {name, KernelClass::memory, kernel_dtype_of<T>(), n * flops_per_element,
          element_bytes(kernel_dtype_of<T>()) * n * (reads + writes) + extra_bytes};
}

// Attention over B sequences of Tn tokens, H query heads of width D: each of its `products` score-
// sized products (Q K^T, P V, and in backward dP, dQ, dK; flash's backward recomputes P: one more)
// is 2 B H Tn^2 D flops over the whole square, half of that under the causal mask; the softmax
// adds ~5 flops per score. `elements`: the storage-type elements read and written (qkv, out, the
// naive kernel's scores and probabilities); `extra_bytes`: fp32 side tensors (log-sum-exp).
template <typename T>
KernelCall attention_call(const char* name, double B, double Tn, double H, double D, bool causal, double products,
                          double elements, double extra_bytes = 0) {
  const double scores = B * H * Tn * Tn * (causal ? 0.5 : 1.0);
  return {name, KernelClass::attention, kernel_dtype_of<T>(), products * 2.0 * scores * D + 5.0 * scores,
          element_bytes(kernel_dtype_of<T>()) * elements + extra_bytes};
}

}  // namespace trainmem::kernels
