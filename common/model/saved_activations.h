// What the model saves for backward, tensor by tensor: the activation formula of each family,
// written once, beside the blocks that allocate them (gpt.cpp, llama.cpp), and tested against the
// run (common/tests/test_saved_activations.cpp). The checkpointing formula and the estimator's
// check read it; common/model/README.md shows it per family.
//
// Elements per layer (e = the storage type's bytes; norm statistics and lse are fp32 in every
// precision; D = C / H; Vp = padded_vocab(V)):
//   gpt    ln1 BTC, ln1.mean + ln1.rstd 2BT, qkv 3BTC, attention, atty BTC, residual2 BTC,
//          ln2 BTC, ln2.mean + ln2.rstd 2BT, fc 4BTC, gelu 4BTC          = 15 BTC e + 16 BT bytes
//   llama  attn_norm BTC, attn_norm.rstd BT, qkv BT(H + 2Hkv)D, attention, atty BTC, residual2 BTC,
//          mlp_norm BTC, mlp_norm.rstd BT, gate BTF, up BTF, swiglu BTF
//                                              = (4 BTC + BT(H + 2Hkv)D + 3 BTF) e + 8 BT bytes
//   attention: naive saves the probabilities B H T^2 e; flash and cudnn the log-sum-exp B H T fp32.
//   selective recompute drops the probabilities and the MLP nonlinearity's output (gelu 4BTC,
//   swiglu BTF).
// Besides the layers: one residual-stream tensor x_l (BTC) per layer input and the final one, and
// the head: the final norm's output BTC and its statistics (gpt 2BT, llama BT), the logits BTVp.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

#include "common/model/attention_kind.h"
#include "common/model/model_config.h"
#include "common/tensor/dtype.h"

namespace trainmem {

struct SavedTensor {
  std::string name;        // as the model names it, without the layer prefix: "qkv", "mlp.gate.out"
  std::size_t bytes = 0;   // requested, before the allocator rounds it (round_size)
  bool selective = false;  // dropped by selective recompute (rebuilt before the layer's backward)
};

struct SavedActivations {
  std::vector<SavedTensor> layer;  // one layer's, in the order its forward makes them
  std::vector<SavedTensor> head;   // the final norm's output and statistics, the logits
  std::size_t residual = 0;        // one tensor of the residual stream, x_l

  // Sums of the listed tensors, each rounded as the allocator rounds a request (round_size):
  // what they occupy while every one is in the small pool or split to its size.
  std::size_t layer_blocks() const;
  std::size_t selective_blocks() const;  // the part of layer_blocks() selective recompute drops
  std::size_t head_blocks() const;
  std::size_t residual_block() const;
};

// The tensors a micro-batch of B sequences of T tokens saves, for the model `config`, stored in
// `dtype`, with `attention`.
SavedActivations saved_activations(const ModelConfig& config, std::size_t B, std::size_t T, DType dtype,
                                   AttentionKind attention);

}  // namespace trainmem
