#include "common/model/hf_config.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <optional>
#include <set>
#include <sstream>
#include <vector>

#include "kernels/layernorm.h"

namespace trainmem {

namespace {

constexpr std::uintmax_t kMaxConfigBytes = 4 << 20;  // a config.json is a few KiB; anything larger is not one

// Fields that describe the checkpoint or generation, not the training step's shapes: read by no
// one here, and not worth a line.
const std::set<std::string> kIrrelevant = {
    "_name_or_path", "architectures", "model_type", "torch_dtype", "dtype", "transformers_version",
    "bos_token_id", "eos_token_id", "pad_token_id", "use_cache", "initializer_range", "output_attentions",
    "output_hidden_states", "return_dict", "task_specific_params", "n_ctx", "summary_type", "summary_use_proj",
    "summary_activation", "summary_proj_to_labels", "summary_first_dropout", "pretraining_tp", "id2label", "label2id", "tokenizer_class", "problem_type", "finetuning_task",
};

// The config's fields, each read once with its family's default; remembers which were read, and
// collects what was not honoured.
class Fields {
 public:
  Fields(const nlohmann::json& j, std::string where) : j_(j), where_(std::move(where)) {}

  std::size_t count(const char* key, std::size_t fallback) {
    const nlohmann::json* v = find(key);
    if (!v || v->is_null()) return fallback;
    if (!v->is_number_unsigned() || v->get<std::uint64_t>() == 0) refuse(key, *v, "a whole number of at least 1");
    return static_cast<std::size_t>(v->get<std::uint64_t>());
  }
  std::optional<std::size_t> optional_count(const char* key) {
    const nlohmann::json* v = find(key);
    if (!v || v->is_null()) return std::nullopt;
    return count(key, 0);
  }
  double number(const char* key, double fallback) {
    const nlohmann::json* v = find(key);
    if (!v || v->is_null()) return fallback;
    if (!v->is_number() || !std::isfinite(v->get<double>())) refuse(key, *v, "a finite number");
    return v->get<double>();
  }
  bool flag(const char* key, bool fallback) {
    const nlohmann::json* v = find(key);
    if (!v || v->is_null()) return fallback;
    if (!v->is_boolean()) refuse(key, *v, "true or false");
    return v->get<bool>();
  }
  std::string text(const char* key, const std::string& fallback) {
    const nlohmann::json* v = find(key);
    if (!v || v->is_null()) return fallback;
    if (!v->is_string()) refuse(key, *v, "a string");
    return v->get<std::string>();
  }
  // Present and not null (the value is not read: a feature trainmem refuses by its presence).
  bool given(const char* key) {
    const nlohmann::json* v = find(key);
    return v && !v->is_null();
  }
  // In the file, null or not (a null can mean "none" where the default is a value).
  bool present(const char* key) { return find(key) != nullptr; }
  const nlohmann::json& raw(const char* key) { return *find(key); }

  // A field whose value trainmem cannot honour: the run would compute something else.
  [[noreturn]] void not_modelled(const std::string& key, const std::string& why) const {
    const nlohmann::json* v = j_.contains(key) ? &j_.at(key) : nullptr;
    throw HfConfigError(where_ + ": " + key + (v ? " = " + v->dump() : "") + ": " + why);
  }
  // A field read and not honoured that changes no shape: said in the origin.
  void note(const std::string& what) { notes_.push_back(what); }

  // Every field neither read nor known to be irrelevant (its name, for the origin).
  std::vector<std::string> unread() const {
    std::vector<std::string> out;
    for (const auto& [key, value] : j_.items())
      if (!read_.count(key) && !kIrrelevant.count(key)) out.push_back(key);
    return out;
  }
  const std::vector<std::string>& notes() const { return notes_; }
  const std::string& where() const { return where_; }

 private:
  const nlohmann::json* find(const char* key) {
    read_.insert(key);
    return j_.contains(key) ? &j_.at(key) : nullptr;
  }
  [[noreturn]] void refuse(const char* key, const nlohmann::json& v, const char* expected) const {
    throw HfConfigError(where_ + ": " + key + " is " + v.dump() + ", not " + expected);
  }

  const nlohmann::json& j_;
  std::string where_;
  std::set<std::string> read_;
  std::vector<std::string> notes_;
};

// Dropout probabilities: trainmem trains without dropout, so the masks PyTorch would save are not
// counted; a non-zero one is said.
void note_dropout(Fields& f, std::initializer_list<const char*> keys, double fallback) {
  for (const char* key : keys)
    if (const double p = f.number(key, fallback); p != 0) {
      std::ostringstream text;
      text << key << "=" << p;
      f.note(text.str() + " (no dropout: its masks are not counted)");
    }
}

// GPT2Config: n_embd 768, n_layer 12, n_head 12, n_positions 1024, vocab_size 50257, n_inner None
// (4 * n_embd), activation_function gelu_new, layer_norm_epsilon 1e-5, tied embeddings, dropouts 0.1.
ModelConfig gpt2(Fields& f) {
  ModelConfig c;
  c.arch = Arch::gpt;
  c.dim = f.count("n_embd", 768);
  c.layers = f.count("n_layer", 12);
  c.heads = f.count("n_head", 12);
  c.seq = f.count("n_positions", 1024);
  c.vocab = f.count("vocab_size", 50257);
  if (const auto inner = f.optional_count("n_inner"); inner && *inner != 4 * c.dim)
    f.not_modelled("n_inner", "trainmem's GPT MLP is 4 * n_embd = " + std::to_string(4 * c.dim) + " wide");
  const std::string act = f.text("activation_function", "gelu_new");
  if (act != "gelu_new" && act != "gelu_pytorch_tanh")
    f.not_modelled("activation_function", "trainmem's GPT uses the tanh GELU (gelu_new)");
  if (f.number("layer_norm_epsilon", 1e-5) != kernels::kLayerNormEps)
    f.not_modelled("layer_norm_epsilon", "trainmem's LayerNorm uses 1e-5");
  if (!f.flag("tie_word_embeddings", true)) f.not_modelled("tie_word_embeddings", "trainmem's GPT ties its head to wte");
  if (!f.flag("scale_attn_weights", true)) f.not_modelled("scale_attn_weights", "attention is scaled by 1/sqrt(D)");
  if (f.flag("scale_attn_by_inverse_layer_idx", false))
    f.not_modelled("scale_attn_by_inverse_layer_idx", "attention is scaled by 1/sqrt(D) alone");
  if (f.flag("reorder_and_upcast_attn", false)) f.not_modelled("reorder_and_upcast_attn", "not modelled");
  if (f.flag("add_cross_attention", false)) f.not_modelled("add_cross_attention", "a decoder-only model is trained");
  note_dropout(f, {"resid_pdrop", "embd_pdrop", "attn_pdrop"}, 0.1);
  return c;
}

// A mixture of experts' fields (model_config.h), Mixtral's or Qwen2-MoE's names and defaults.
void read_experts(Fields& f, ModelConfig& c, bool qwen2_moe) {
  c.experts = f.count(qwen2_moe ? "num_experts" : "num_local_experts", qwen2_moe ? 60 : 8);
  c.experts_per_token = f.count("num_experts_per_tok", qwen2_moe ? 4 : 2);
  if (qwen2_moe) {
    c.expert_ffn_dim = f.count("moe_intermediate_size", 1408);
    c.shared_expert_ffn_dim = f.count("shared_expert_intermediate_size", 5632);
    c.normalize_top_k = f.flag("norm_topk_prob", false);
    // Dense MLPs between the mixtures (every decoder_sparse_step-th layer a mixture, or the layers
    // of mlp_only_layers dense) change the layers' shapes one by one: not modelled.
    if (f.count("decoder_sparse_step", 1) != 1)
      f.not_modelled("decoder_sparse_step", "a mixture of experts in every layer is modelled (1), not dense layers between");
    if (f.given("mlp_only_layers") && !(f.raw("mlp_only_layers").is_array() && f.raw("mlp_only_layers").empty()))
      f.not_modelled("mlp_only_layers", "a mixture of experts in every layer is modelled, not dense layers among them");
  } else {
    c.expert_ffn_dim = c.ffn_dim;  // Mixtral's experts are intermediate_size wide
    c.normalize_top_k = true;      // (MixtralSparseMoeBlock always renormalizes)
    if (f.number("router_jitter_noise", 0) != 0)
      f.not_modelled("router_jitter_noise", "the router's multiplicative noise is not modelled");
  }
  // transformers adds the load-balancing loss only where output_router_logits is set.
  const double coef = f.number("router_aux_loss_coef", 0.001);
  if (!(coef >= 0)) f.not_modelled("router_aux_loss_coef", "a coefficient >= 0");
  if (f.flag("output_router_logits", false)) {
    c.router_aux_loss_coef = coef;
  } else if (coef != 0) {
    std::ostringstream text;
    text << "router_aux_loss_coef=" << coef << " (output_router_logits is false: no load-balancing loss, as transformers; "
         << "--router-aux-loss adds it)";
    f.note(text.str());
  }
}

// The Llama-like families, as transformers' config classes of each default what a file leaves out.
enum class LlamaLike { llama, mistral, qwen2, mixtral, qwen2_moe };

// LlamaConfig: hidden_size 4096, intermediate_size 11008, 32 layers and heads, num_key_value_heads
// None (= heads), hidden_act silu, max_position_embeddings 2048, rms_norm_eps 1e-6, rope_theta
// 10000, tie_word_embeddings false, attention_bias and mlp_bias false, head_dim None (C / H).
// MistralConfig: intermediate_size 14336, 8 K/V heads, 4096*32 positions, sliding_window 4096.
// Qwen2Config: vocab_size 151936, intermediate_size 22016, 32 K/V heads, 32768 positions; q, k, v
// always biased (o and the MLP not: Qwen2Attention's nn.Linear(..., bias=True) on q_proj, k_proj,
// v_proj); a sliding window only with use_sliding_window, on the layers from max_window_layers.
// MixtralConfig: MistralConfig's sizes, rms_norm_eps 1e-5, rope_theta 1e6, no sliding window; 8
// experts (num_local_experts) of intermediate_size, top 2 (num_experts_per_tok), always renormalized.
// Qwen2MoeConfig: hidden_size 2048, 24 layers, 16 heads and K/V heads, 32768 positions, Qwen2's
// biases and window; 60 experts (num_experts) of moe_intermediate_size 1408, top 4, norm_topk_prob
// false, a shared expert of shared_expert_intermediate_size 5632; every layer a mixture
// (decoder_sparse_step 1, mlp_only_layers empty). Both: the load-balancing loss only with
// output_router_logits (false), times router_aux_loss_coef (0.001).
ModelConfig llama(Fields& f, LlamaLike family) {
  const bool mixtral = family == LlamaLike::mixtral, qwen2_moe = family == LlamaLike::qwen2_moe;
  const bool mistral = family == LlamaLike::mistral || mixtral, qwen2 = family == LlamaLike::qwen2 || qwen2_moe;
  ModelConfig c;
  c.arch = Arch::llama;
  c.dim = f.count("hidden_size", qwen2_moe ? 2048 : 4096);
  c.ffn_dim = f.count("intermediate_size", mistral ? 14336 : qwen2_moe ? 5632 : qwen2 ? 22016 : 11008);
  c.layers = f.count("num_hidden_layers", qwen2_moe ? 24 : 32);
  c.heads = f.count("num_attention_heads", qwen2_moe ? 16 : 32);
  c.kv_heads = f.count("num_key_value_heads", mistral ? 8 : qwen2_moe ? 16 : qwen2 ? 32 : c.heads);
  c.seq = f.count("max_position_embeddings", mistral ? 4096 * 32 : qwen2 ? 32768 : 2048);
  c.vocab = f.count("vocab_size", qwen2 ? 151936 : 32000);
  c.norm_eps = f.number("rms_norm_eps", mixtral ? 1e-5 : 1e-6);
  c.rope.theta = f.number("rope_theta", mixtral ? 1e6 : 10000);
  c.tied_head = f.flag("tie_word_embeddings", false);
  c.qkv_bias = qwen2;
  if (mixtral || qwen2_moe) read_experts(f, c, qwen2_moe);
  if (f.text("hidden_act", "silu") != "silu") f.not_modelled("hidden_act", "trainmem's Llama MLP is SwiGLU (silu)");
  if (!qwen2) {  // (Qwen2Config has neither: its biases are fixed)
    if (f.flag("attention_bias", false))
      f.not_modelled("attention_bias", "a bias on the output projection o is not modelled (on q, k, v alone it is: Qwen2)");
    if (f.flag("mlp_bias", false)) f.not_modelled("mlp_bias", "biases on the MLP are not modelled yet");
  }
  // head_dim: as the attention module reads it, getattr(config, "head_dim", None) or C / H.
  if (const auto head_dim = f.optional_count("head_dim"); head_dim && *head_dim * c.heads != c.dim) c.head_dim_set = *head_dim;
  // rope_scaling (transformers 4: {"rope_type" or "type": ..., its fields}) or transformers 5's
  // rope_parameters (the same object with rope_theta inside): none ("default"), or Llama 3.1's
  // "llama3" rescaling of the frequencies (kernels/rope_frequencies.h). Another type is refused.
  for (const char* key : {"rope_scaling", "rope_parameters"}) {
    if (!f.given(key)) continue;
    const nlohmann::json& rope = f.raw(key);
    if (!rope.is_object()) f.not_modelled(key, "not an object");
    const auto number = [&](const char* field, double fallback) {
      if (!rope.contains(field)) return fallback;
      if (!rope[field].is_number() || !std::isfinite(rope[field].get<double>()))
        f.not_modelled(key, std::string(field) + " is not a finite number");
      return rope[field].get<double>();
    };
    c.rope.theta = number("rope_theta", c.rope.theta);
    const char* type_key = rope.contains("rope_type") ? "rope_type" : "type";
    const std::string type = rope.contains(type_key) && rope[type_key].is_string() ? rope[type_key].get<std::string>()
                                                                                     : "default";
    if (type == "default") continue;
    if (type != "llama3")
      f.not_modelled(key, "rope scaling of type '" + type + "' is not modelled (llama3 is)");
    for (const char* field : {"factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"})
      if (!rope.contains(field)) f.not_modelled(key, std::string("llama3 scaling without its ") + field);
    c.rope = kernels::RopeFrequencies::llama3(c.rope.theta, number("factor", 1), number("low_freq_factor", 1),
                                              number("high_freq_factor", 4),
                                              number("original_max_position_embeddings", 8192));
  }
  // A sliding window shorter than the context changes what attention computes on its layers.
  const auto window_refused = [&](const char* key) {
    f.not_modelled(key, "attention over a window shorter than the context (" + std::to_string(c.seq) + ") is not modelled");
  };
  if (qwen2) {
    const bool sliding = f.flag("use_sliding_window", false);
    const std::optional<std::size_t> window =
        f.present("sliding_window") ? f.optional_count("sliding_window") : std::optional<std::size_t>{4096};
    const std::size_t first_sliding = f.count("max_window_layers", 28);
    if (sliding && window && *window < c.seq && first_sliding < c.layers) window_refused("use_sliding_window");
  } else if (mistral || f.given("sliding_window")) {
    // MistralConfig's default window is 4096; null (as written by Mistral Nemo, v0.3) is none.
    // MixtralConfig's default is none.
    const bool default_window = family == LlamaLike::mistral && !f.present("sliding_window");
    const std::optional<std::size_t> window = default_window ? std::optional<std::size_t>{4096}
                                                             : f.optional_count("sliding_window");
    if (window && *window < c.seq) window_refused("sliding_window");
  }
  note_dropout(f, {"attention_dropout"}, 0.0);
  return c;
}

nlohmann::json read_json_file(const std::filesystem::path& file) {
  std::error_code ec;
  const std::uintmax_t size = std::filesystem::file_size(file, ec);
  if (ec) throw HfConfigError(file.string() + ": cannot read it (" + ec.message() + ")");
  if (size > kMaxConfigBytes)
    throw HfConfigError(file.string() + ": " + std::to_string(size) + " bytes is not a config.json (a few KiB)");
  std::ifstream in(file, std::ios::binary);
  if (!in) throw HfConfigError(file.string() + ": cannot open the file for reading");
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    const std::string what = e.what();
    const auto tag_end = what.find("] ");
    throw HfConfigError(file.string() + ": not valid JSON: " + (tag_end == std::string::npos ? what : what.substr(tag_end + 2)));
  }
}

std::string joined(const std::vector<std::string>& items) {
  std::string out;
  for (const std::string& s : items) out += (out.empty() ? "" : ", ") + s;
  return out;
}

}  // namespace

ModelConfig read_hf_config(const std::string& path) {
  std::filesystem::path file = path;
  std::error_code ec;
  if (std::filesystem::is_directory(file, ec)) file /= "config.json";
  if (!std::filesystem::is_regular_file(file, ec))
    throw HfConfigError(path + ": no such file (give a config.json, or the folder holding one)");
  const nlohmann::json j = read_json_file(file);
  if (!j.is_object()) throw HfConfigError(file.string() + ": not a config (a JSON object)");
  Fields f(j, file.string());

  const std::string type = f.text("model_type", "");
  std::string architecture;
  if (j.contains("architectures") && j["architectures"].is_array() && !j["architectures"].empty() &&
      j["architectures"][0].is_string())
    architecture = j["architectures"][0].get<std::string>();
  ModelConfig c;
  if (type == "gpt2") {
    c = gpt2(f);
  } else if (type == "llama") {
    c = llama(f, LlamaLike::llama);
  } else if (type == "mistral") {
    c = llama(f, LlamaLike::mistral);
  } else if (type == "qwen2") {
    c = llama(f, LlamaLike::qwen2);
  } else if (type == "mixtral") {
    c = llama(f, LlamaLike::mixtral);
  } else if (type == "qwen2_moe") {
    c = llama(f, LlamaLike::qwen2_moe);
  } else {
    f.not_modelled("model_type", std::string(type.empty() ? "absent: the family is not known (" : "not a family trainmem reads (") +
                                     kHfConfigFamilies + (type.empty() ? " are read)" : " are)"));
  }
  if (!architecture.empty() && architecture.find("ForCausalLM") == std::string::npos && architecture != "GPT2LMHeadModel")
    f.not_modelled("architectures", "trainmem trains a causal language model (…ForCausalLM, GPT2LMHeadModel)");
  if (type != "mixtral" && type != "qwen2_moe")
    for (const char* moe : {"num_local_experts", "num_experts"})
      if (f.given(moe)) f.not_modelled(moe, "a mixture of experts is read from mixtral and qwen2_moe configs");

  // The name: the checkpoint's, else its folder's.
  const std::string name_or_path = j.contains("_name_or_path") && j["_name_or_path"].is_string()
                                       ? j["_name_or_path"].get<std::string>() : "";
  c.name = !name_or_path.empty() ? std::filesystem::path(name_or_path).filename().string()
                                 : file.parent_path().filename().string();
  if (c.name.empty()) c.name = type;
  c.origin = "from " + file.string() + " (" + type + (architecture.empty() ? "" : ", " + architecture) + ")";
  if (!f.notes().empty()) c.origin += "; not modelled: " + joined(f.notes());
  if (const auto unread = f.unread(); !unread.empty()) c.origin += "; not read: " + joined(unread);
  c.validate();
  return c;
}

}  // namespace trainmem
