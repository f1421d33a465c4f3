#include "common/model/parameter_table.h"

#include <stdexcept>

#include "common/util/checked_math.h"

namespace trainmem {

std::size_t ParameterInfo::numel() const {
  std::size_t n = 1;
  for (std::int64_t d : shape) n = checked_mul(n, static_cast<std::size_t>(d), "a parameter's elements");
  return n;
}

ParameterTable::ParameterTable(const ModelConfig& config)
    : arch_(config.arch),
      layers_(config.layers),
      tied_head_(config.head_is_tied()) {
  for (std::size_t& slot : slot_) slot = kAbsent;
  const auto V = static_cast<std::int64_t>(config.vocab), Vp = static_cast<std::int64_t>(padded_vocab(config.vocab)),
             T = static_cast<std::int64_t>(config.seq), C = static_cast<std::int64_t>(config.dim);
  using I = ParameterInit;
  auto layer_prefix = [](std::size_t l) {
    std::string h = "h";  // (+=: GCC 12 warns falsely about "h" + std::to_string(l) + ".")
    h += std::to_string(l);
    h += ".";
    return h;
  };
  if (arch_ == Arch::llama) {
    const auto F = static_cast<std::int64_t>(config.mlp_dim()),
               QKV = static_cast<std::int64_t>((config.heads + 2 * config.num_kv_heads()) * config.head_dim()),
               HD = static_cast<std::int64_t>(config.attention_dim()), E = static_cast<std::int64_t>(config.experts),
               Fe = static_cast<std::int64_t>(config.expert_ffn_dim), Fs = static_cast<std::int64_t>(config.shared_expert_ffn_dim);
    experts_ = config.moe() ? config.experts : 0;
    using P = LlamaLayerParameter;
    // One layer's tensors, in order (the same in every layer): a name, a shape, an init, and the
    // parameter it is, or none for an expert's (those are addressed through first_expert_slot_).
    struct LayerEntry {
      std::string name;
      std::vector<std::int64_t> shape;
      ParameterInit init;
    };
    std::vector<LayerEntry> layer;
    auto add = [&](P which, std::string name, std::vector<std::int64_t> shape, ParameterInit init) {
      slot_[static_cast<std::size_t>(which)] = layer.size();
      layer.push_back({std::move(name), std::move(shape), init});
    };
    add(P::attn_norm_weight, "attn_norm.weight", {C}, I::ones);
    add(P::qkv_weight, "attn.qkv.weight", {QKV, C}, I::normal);
    if (config.qkv_bias) add(P::qkv_bias, "attn.qkv.bias", {QKV}, I::zeros);
    add(P::attn_proj_weight, "attn.proj.weight", {C, HD}, I::residual);
    add(P::mlp_norm_weight, "mlp_norm.weight", {C}, I::ones);
    if (!config.moe()) {
      add(P::gate_weight, "mlp.gate.weight", {F, C}, I::normal);
      add(P::up_weight, "mlp.up.weight", {F, C}, I::normal);
      add(P::down_weight, "mlp.down.weight", {C, F}, I::residual);
    } else {
      add(P::router_weight, "mlp.router.weight", {E, C}, I::normal);
      first_expert_slot_ = layer.size();
      for (std::size_t e = 0; e < experts_; ++e) {  // in ExpertParameter order
        const std::string expert = "mlp.experts." + std::to_string(e) + ".";
        layer.push_back({expert + "gate.weight", {Fe, C}, I::normal});
        layer.push_back({expert + "up.weight", {Fe, C}, I::normal});
        layer.push_back({expert + "down.weight", {C, Fe}, I::residual});
      }
      if (Fs != 0) {
        add(P::shared_gate_weight, "mlp.shared_expert.gate.weight", {Fs, C}, I::normal);
        add(P::shared_up_weight, "mlp.shared_expert.up.weight", {Fs, C}, I::normal);
        add(P::shared_down_weight, "mlp.shared_expert.down.weight", {C, Fs}, I::residual);
        add(P::shared_expert_gate_weight, "mlp.shared_expert_gate.weight", {1, C}, I::normal);
      }
    }
    per_layer_ = layer.size();
    entries_.reserve(3 + layers_ * per_layer());
    entries_.push_back({"wte", {Vp, C}, -1, I::normal, Vp - V});
    for (std::size_t l = 0; l < layers_; ++l) {
      const std::string h = layer_prefix(l);
      for (const LayerEntry& e : layer) entries_.push_back({h + e.name, e.shape, static_cast<long>(l), e.init});
    }
    entries_.push_back({"norm.weight", {C}, -1, I::ones});
    if (!tied_head_) entries_.push_back({"head.weight", {Vp, C}, -1, I::normal, Vp - V});
    return;
  }
  entries_.reserve(4 + layers_ * kParametersPerLayer);
  entries_.push_back({"wte", {Vp, C}, -1, I::normal, Vp - V});
  entries_.push_back({"wpe", {T, C}, -1, I::normal});
  for (std::size_t l = 0; l < layers_; ++l) {
    const std::string h = layer_prefix(l);
    const auto layer = static_cast<long>(l);
    // In LayerParameter order.
    entries_.push_back({h + "ln1.weight", {C}, layer, I::ones});
    entries_.push_back({h + "ln1.bias", {C}, layer, I::zeros});
    entries_.push_back({h + "attn.qkv.weight", {3 * C, C}, layer, I::normal});
    entries_.push_back({h + "attn.qkv.bias", {3 * C}, layer, I::zeros});
    entries_.push_back({h + "attn.proj.weight", {C, C}, layer, I::residual});
    entries_.push_back({h + "attn.proj.bias", {C}, layer, I::zeros});
    entries_.push_back({h + "ln2.weight", {C}, layer, I::ones});
    entries_.push_back({h + "ln2.bias", {C}, layer, I::zeros});
    entries_.push_back({h + "mlp.fc.weight", {4 * C, C}, layer, I::normal});
    entries_.push_back({h + "mlp.fc.bias", {4 * C}, layer, I::zeros});
    entries_.push_back({h + "mlp.proj.weight", {C, 4 * C}, layer, I::residual});
    entries_.push_back({h + "mlp.proj.bias", {C}, layer, I::zeros});
  }
  entries_.push_back({"lnf.weight", {C}, -1, I::ones});
  entries_.push_back({"lnf.bias", {C}, -1, I::zeros});
}

std::size_t ParameterTable::index(std::size_t layer, LlamaLayerParameter which) const {
  if (!has(which))
    throw std::logic_error("ParameterTable::index: this model has no parameter #" +
                           std::to_string(static_cast<std::size_t>(which)) + " in its layers (parameter_table.h)");
  return 1 + layer * per_layer() + slot_[static_cast<std::size_t>(which)];
}

std::size_t ParameterTable::index(std::size_t layer, std::size_t expert, ExpertParameter which) const {
  if (expert >= experts_)
    throw std::logic_error("ParameterTable::index: expert " + std::to_string(expert) + " of " + std::to_string(experts_));
  return 1 + layer * per_layer() + first_expert_slot_ + 3 * expert + static_cast<std::size_t>(which);
}

std::vector<std::size_t> ParameterTable::root_indices() const {
  if (arch_ == Arch::llama) {
    if (tied_head_) return {kWte, norm_weight()};
    return {kWte, norm_weight(), head_weight()};
  }
  return {kWte, kWpe, lnf_weight(), lnf_bias()};
}

std::vector<std::size_t> ParameterTable::layer_indices(std::size_t layer) const {
  const std::size_t first = arch_ == Arch::llama ? 1 : 2;
  std::vector<std::size_t> indices;
  for (std::size_t k = 0; k < per_layer(); ++k) indices.push_back(first + layer * per_layer() + k);
  return indices;
}

std::size_t ParameterTable::root_numel() const {
  std::size_t n = 0;
  for (std::size_t i : root_indices()) n += entries_[i].numel();
  return n;
}

std::size_t ParameterTable::layer_numel() const {
  if (layers_ == 0) return 0;
  std::size_t n = 0;
  for (std::size_t i : layer_indices(0)) n += entries_[i].numel();
  return n;
}

std::size_t ParameterTable::total_numel() const {
  return checked_add(root_numel(), checked_mul(layers_, layer_numel(), "the model's parameters"), "the model's parameters");
}

std::size_t ParameterTable::padding_numel() const {
  std::size_t n = 0;
  for (const ParameterInfo& p : entries_)
    if (p.padding_rows > 0) n += static_cast<std::size_t>(p.padding_rows) * (p.numel() / static_cast<std::size_t>(p.shape[0]));
  return n;
}

}  // namespace trainmem
