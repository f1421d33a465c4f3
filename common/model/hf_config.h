// A Hugging Face `config.json` as the model description: read as transformers reads it (each
// family's config class: its field names, and its default for a field the file leaves out), never
// executed (it is JSON; no remote code).
//
//   trainmem info --hf-config path/to/config.json      (or the folder holding it)
//
// Families: model_type gpt2 (GPT2LMHeadModel) -> trainmem's GPT; llama (LlamaForCausalLM), mistral
// (MistralForCausalLM) and qwen2 (Qwen2ForCausalLM) -> its Llama block, with a tied head
// (tie_word_embeddings), q/k/v biases (qwen2) and head_dim where the file sets them; mixtral
// (MixtralForCausalLM) and qwen2_moe (Qwen2MoeForCausalLM) -> the same block with a mixture of
// experts as its MLP (and Qwen2-MoE's shared expert). A field that
// would change the computation in a way trainmem does not model is refused, naming it (biases on o
// or the MLP, rope scaling other than llama3's, a sliding window shorter than the context, dense
// layers among the experts, router noise; another activation). A field read and not honoured that changes no shape (dropout) is
// said in the model's origin, and so is a field the reader does not know: never a silent default.
#pragma once
#include <string>

#include "common/model/model_config.h"

namespace trainmem {

// The model_types read, as messages and help name them.
inline constexpr const char* kHfConfigFamilies = "gpt2, llama, mistral, qwen2, mixtral and qwen2_moe";

// The file cannot be read as a config, or it describes what trainmem does not model (the message
// names the field and its value).
struct HfConfigError : ModelConfigError {
  using ModelConfigError::ModelConfigError;
};

// The model `path` describes (a config.json, or a folder holding one). Its name is the folder's
// (or _name_or_path's); its origin says the file, the architecture, and what was not honoured.
// Throws HfConfigError.
ModelConfig read_hf_config(const std::string& path);

}  // namespace trainmem
