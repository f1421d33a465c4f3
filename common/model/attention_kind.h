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

namespace trainmem {

enum class AttentionKind { naive, flash, cudnn };

inline AttentionKind parse_attention(const std::string& text) {
  if (text == "naive") return AttentionKind::naive;
  if (text == "flash") return AttentionKind::flash;
  if (text == "cudnn") return AttentionKind::cudnn;
  throw std::invalid_argument("--attention must be naive, flash or cudnn, not '" + text + "'");
}

inline std::string to_string(AttentionKind a) {
  switch (a) {
    case AttentionKind::naive: return "naive";
    case AttentionKind::flash: return "flash";
    case AttentionKind::cudnn: return "cudnn";
  }
  return "?";
}

}  // namespace trainmem
