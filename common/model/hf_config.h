// A Hugging Face `config.json` as the model description: read as transformers reads it (each
// family's config class: its field names, and its default for a field the file leaves out), never
// executed (it is JSON; no remote code).
//
//   trainmem info --hf-config path/to/config.json      (or the folder holding it)
//
// Families: model_type gpt2 (GPT2LMHeadModel) -> trainmem's GPT; llama (LlamaForCausalLM) and
// mistral (MistralForCausalLM) -> its Llama block. A field that would change the computation in a
// way trainmem does not model is refused, naming it (tied embeddings on the Llama family, biases,
// head_dim != hidden_size / num_attention_heads, rope scaling, a sliding window shorter than the
// context, mixture of experts, another activation); so are the families not modelled yet (qwen2,
// mixtral, qwen2_moe). A field read and not honoured that changes no shape (dropout) is said in the
// model's origin, and so is a field the reader does not know: never a silent default.
#pragma once
#include <string>

#include "common/model/model_config.h"

namespace trainmem {

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
