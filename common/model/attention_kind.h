// Which attention implementation the model runs (--attention).
//
//   naive  the scores and probabilities materialized (B*H*T*T each); the probabilities are saved
//          for backward: O(T^2) memory per layer (kernels/attention.h)
//   flash  tiled online softmax; saves only the output and one log-sum-exp per row: O(T)
//          (kernels/flash_attention.h; CPU reference, or the CUDA kernels in bf16/fp16)
//   cudnn  cuDNN's fused attention through cudnn-frontend (GPU, bf16/fp16; same O(T) memory)
#pragma once
#include <string>

#include "common/cli/enum_table.h"

namespace trainmem {

enum class AttentionKind { naive, flash, cudnn };

inline constexpr auto kAttentionKinds = cli::enum_table<AttentionKind>(
    "--attention", {{AttentionKind::naive, "naive"}, {AttentionKind::flash, "flash"}, {AttentionKind::cudnn, "cudnn"}});

inline std::string to_string(AttentionKind a) { return std::string(kAttentionKinds.name(a)); }

}  // namespace trainmem
