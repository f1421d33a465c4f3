// Which attention implementation the model runs (--attention).
//
//   naive  the scores and probabilities materialized (B*H*T*T each); the probabilities are saved
//          for backward: O(T^2) memory per layer (kernels/attention.h)
//   flash  tiled online softmax; saves only the output and one log-sum-exp per row: O(T)
//          (kernels/flash_attention.h; CPU reference, or the CUDA kernels in bf16/fp16)
//   cudnn  cuDNN's fused attention through cudnn-frontend (GPU, bf16/fp16; same O(T) memory)
#pragma once
#include <stdexcept>
#include <string>

#include "common/cli/enum_table.h"

namespace trainmem {

enum class AttentionKind { naive, flash, cudnn };

inline constexpr auto kAttentionKinds = cli::enum_table<AttentionKind>(
    "--attention", {{AttentionKind::naive, "naive"}, {AttentionKind::flash, "flash"}, {AttentionKind::cudnn, "cudnn"}});

inline std::string to_string(AttentionKind a) { return std::string(kAttentionKinds.name(a)); }

// Where each kind runs, said once (the model checks it when it is built, the flash attention
// technique before anything is built): the CUDA flash and cuDNN kernels take 16-bit inputs only,
// and cuDNN exists on a GPU only. Throws std::invalid_argument naming the flag to change.
inline void check_attention_runs(AttentionKind kind, bool on_gpu, bool sixteen_bit) {
  if (kind != AttentionKind::naive && on_gpu && !sixteen_bit)
    throw std::invalid_argument("--attention " + to_string(kind) + " runs on a GPU in 16 bits: add --precision bf16 (or fp16)");
  if (kind == AttentionKind::cudnn && !on_gpu)
    throw std::invalid_argument("--attention cudnn needs a CUDA device; on the CPU use --attention flash");
}

}  // namespace trainmem
