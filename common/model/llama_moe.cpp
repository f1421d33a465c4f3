// Llama's mixture-of-experts MLP (Mixtral, Qwen2-MoE; model_config.h), dropless and grouped, on
// n = mlp_norm(residual2), N = B*T tokens (kernels/moe.h has the kernels and their formulas):
//
//   p = softmax(n Wr^T)                       the router's probabilities [N, E], fp32
//   e_1..e_k = the k largest p, w_j = p_{e_j} (/ sum_j p_{e_j} where the config renormalizes)
//   rows: the N*k (token, choice) pairs grouped by expert (kernels::moe_plan): expert e's count_e
//         rows are contiguous, in token order
//   per expert e, on its rows of dispatch(n) [N*k, C]:  y = down_e(silu(gate_e(.)) * up_e(.))
//   x_{l+1} = residual2 + sum_j w_j y[row(n, j)]  (+ sigmoid(n . w_sg) shared(n), Qwen2-MoE's
//             shared expert: a dense SwiGLU MLP of width Fs that every token reaches)
//
// Dropless: every token reaches its k experts (no capacity factor, no token dropped). The grouped
// buffers always have N*k rows, whatever the routing: the memory of a step is the same for a
// balanced routing and for every token sent to one expert (only the matmuls' row counts move), so
// the meta device, which routes nothing, counts it exactly. Every expert's gradient is made (and
// zeroed) even when no token reached it, so the gradients' memory does not follow the routing either.
//
// Saved for the backward, per layer (beside mlp_norm and its rstd):
//   router.probs [N, E] fp32, router.experts [N, k] int32, router.weights [N, k] fp32,
//   moe.rows [N, k] int32, moe.gate.out, moe.up.out, moe.swiglu.out [N*k, Fe] (the last one dropped
//   by selective recompute), moe.out [N*k, C]; with a shared expert its gate.out, up.out, swiglu.out
//   [N, Fs], its output [N, C] and its gate's logit [N].
// The experts' input dispatch(n) is not saved: the backward copies it out of mlp_norm again.
//
// The load-balancing loss (Switch Transformer; transformers' load_balancing_loss_func over all
// layers' tokens at once, added only where the config says so):
//   aux = E * sum_e f_e P_e,   f_e = c_e / (L N)  (c_e: the k choices of all L*N token rows that are e)
//                              P_e = (sum over the L*N rows of p[row, e]) / (L N)
//   loss += coef * aux,   d aux / d p[row, e] = E c_e / (L N)^2   (f_e is a count: no gradient)
#include <algorithm>
#include <optional>
#include <string>

#include "common/device/device_ops.h"
#include "common/model/llama.h"
#include "common/model/storage_type.h"
#include "kernels/matmul.h"
#include "kernels/moe.h"
#include "kernels/residual.h"
#include "kernels/swiglu.h"

namespace trainmem {

namespace {
using Shape = std::vector<std::int64_t>;
Shape rows_of(std::size_t rows, std::size_t width) {
  return {static_cast<std::int64_t>(rows), static_cast<std::int64_t>(width)};
}
}  // namespace

Llama::MoeSizes Llama::moe_sizes() const {
  const std::size_t N = B_ * T_, k = config_.experts_per_token;
  return {N, config_.dim, config_.experts, k, config_.expert_ffn_dim, config_.shared_expert_ffn_dim, N * k};
}

std::vector<std::int32_t> Llama::expert_counts(const Tensor& counts) const {
  const std::size_t E = config_.experts, rows = B_ * T_ * config_.experts_per_token;
  std::vector<std::int32_t> host(E);
  if (device_.computes()) {
    copy_device_to_host(device_, host.data(), counts.data(), E * sizeof(std::int32_t));
  } else {  // balanced: rows / E each, the first rows % E experts one more
    for (std::size_t e = 0; e < E; ++e) host[e] = static_cast<std::int32_t>(rows / E + (e < rows % E ? 1 : 0));
  }
  return host;
}

void Llama::moe_forward(std::size_t l, LlamaLayerActivations& a, bool produce_output) {
  with_storage_type(dtype_, [&](auto tag) {
    using T = decltype(tag);
    const auto s = kernel_stream(device_);
    const MoeSizes z = moe_sizes();
    const std::string h = indexed_name("h", l, ".");
    using A = MemoryCategory;

    // The router: probabilities, each token's k experts and their weights.
    {
      Tensor logits = make(per_token(z.E), A::workspace, h + "mlp.router.out");
      linear_forward(logits, a.mlp_norm, p(l, W::router_weight), nullptr, z.N, z.C, z.E);
      a.router_probs = make_f32(per_token(z.E), A::activations, h + "mlp.router.probs");
      a.router_experts = make_i32(per_token(z.k), A::activations, h + "mlp.router.experts");
      a.router_weights = make_f32(per_token(z.k), A::activations, h + "mlp.router.weights");
      kernels::moe_router_forward<T>(s, f32(a.router_probs), i32(a.router_experts), f32(a.router_weights),
                                     logits.data_as<T>(), z.N, z.E, z.k, config_.normalize_top_k);
    }
    // The grouped layout: each (token, choice)'s row, and each expert's row count (to the host:
    // the experts' matmuls are launched from there).
    a.expert_rows = make_i32(per_token(z.k), A::activations, h + "moe.rows");
    {
      Tensor counts = make_i32({static_cast<std::int64_t>(z.E)}, A::workspace, h + "moe.counts");
      kernels::moe_plan(s, i32(a.expert_rows), i32(counts), i32(a.router_experts), z.N, z.E, z.k);
      a.expert_counts = expert_counts(counts);
    }
    if (load_balancing()) {  // this layer's share of the load-balancing loss: counts and probability sums
      RouterStatistics& stats = router_statistics_.at(l);
      stats.counts.assign(a.expert_counts.begin(), a.expert_counts.end());
      stats.probability_sums.assign(z.E, 0.0);
      Tensor sums = make_f32({static_cast<std::int64_t>(z.E)}, A::workspace, h + "mlp.router.probs.sum");
      kernels::moe_expert_prob_sums(s, f32(sums), f32(a.router_probs), z.N, z.E);
      if (device_.computes()) {
        std::vector<float> host(z.E);
        copy_device_to_host(device_, host.data(), sums.data(), z.E * sizeof(float));
        std::copy(host.begin(), host.end(), stats.probability_sums.begin());
      }
    }
    // Expert e's matmul on its rows [first, first + count) of a grouped buffer (none without rows).
    const auto for_each_expert = [&](auto&& run) {
      std::size_t first = 0;
      for (std::size_t e = 0; e < z.E; ++e) {
        const auto count = static_cast<std::size_t>(a.expert_counts[e]);
        if (count > 0) run(e, first, count);
        first += count;
      }
    };
    using X = ExpertParameter;
    {
      Tensor grouped = make(rows_of(z.rows, z.C), A::workspace, h + "moe.in");
      kernels::moe_dispatch<T>(s, grouped.data_as<T>(), a.mlp_norm.data_as<T>(), i32(a.expert_rows), z.N, z.k, z.C);
      a.expert_gate = make(rows_of(z.rows, z.Fe), A::activations, h + "moe.gate.out");
      a.expert_up = make(rows_of(z.rows, z.Fe), A::activations, h + "moe.up.out");
      for_each_expert([&](std::size_t e, std::size_t first, std::size_t count) {
        const T* in = grouped.data_as<T>() + first * z.C;
        kernels::matmul_forward<T>(s, a.expert_gate.data_as<T>() + first * z.Fe, in,
                                   param(table_.index(l, e, X::gate_weight)).data_as<T>(), nullptr, count, z.C, z.Fe);
        kernels::matmul_forward<T>(s, a.expert_up.data_as<T>() + first * z.Fe, in,
                                   param(table_.index(l, e, X::up_weight)).data_as<T>(), nullptr, count, z.C, z.Fe);
      });
    }
    a.expert_swiglu = make(rows_of(z.rows, z.Fe), A::activations, h + "moe.swiglu.out");
    kernels::swiglu_forward<T>(s, a.expert_swiglu.data_as<T>(), a.expert_gate.data_as<T>(), a.expert_up.data_as<T>(),
                               z.rows * z.Fe);
    a.expert_out = make(rows_of(z.rows, z.C), A::activations, h + "moe.out");
    for_each_expert([&](std::size_t e, std::size_t first, std::size_t count) {
      kernels::matmul_forward<T>(s, a.expert_out.data_as<T>() + first * z.C, a.expert_swiglu.data_as<T>() + first * z.Fe,
                                 param(table_.index(l, e, X::down_weight)).data_as<T>(), nullptr, count, z.Fe, z.C);
    });
    // The shared expert (Qwen2-MoE): the dense SwiGLU MLP of width Fs, and its gate's logit.
    if (z.Fs != 0) {
      swiglu_mlp_forward(l, a, z.Fs, W::shared_gate_weight, W::shared_up_weight, h + "mlp.shared_expert.");
      a.shared_out = make(per_token(z.C), A::activations, h + "mlp.shared_expert.out");
      linear_forward(a.shared_out, a.swiglu, p(l, W::shared_down_weight), nullptr, z.N, z.Fs, z.C);
      a.shared_gate_logit = make(per_token(), A::activations, h + "mlp.shared_expert_gate.out");
      kernels::moe_shared_gate_forward<T>(s, a.shared_gate_logit.data_as<T>(), a.mlp_norm.data_as<T>(),
                                          p(l, W::shared_expert_gate_weight).data_as<T>(), z.N, z.C);
    }
    if (!produce_output) return;  // recomputing for backward: x_{l+1} is not needed again
    residual_[l + 1] = make(per_token(z.C), A::activations, indexed_name("x", l + 1));
    kernels::moe_combine<T>(s, residual_[l + 1].data_as<T>(), a.residual2.data_as<T>(), a.expert_out.data_as<T>(),
                            f32(a.router_weights), i32(a.expert_rows), z.Fs ? a.shared_out.data_as<T>() : nullptr,
                            z.Fs ? a.shared_gate_logit.data_as<T>() : nullptr, z.N, z.k, z.C);
  });
}

Tensor Llama::moe_backward(std::size_t l, LlamaLayerActivations& a) {
  Tensor dnorm;
  with_storage_type(dtype_, [&](auto tag) {
    using T = decltype(tag);
    const auto s = kernel_stream(device_);
    const MoeSizes z = moe_sizes();
    const std::string h = indexed_name("h", l, ".");
    using A = MemoryCategory;
    using X = ExpertParameter;
    // Every expert's gradient, in expert order, whether or not a token reached it (the gradients'
    // memory does not follow the routing); the matmul on its rows where it has any.
    const auto for_each_expert = [&](X which, auto&& run) {
      std::size_t first = 0;
      for (std::size_t e = 0; e < z.E; ++e) {
        Tensor& grad = grad_for_write(table_.index(l, e, which));
        const auto count = static_cast<std::size_t>(a.expert_counts[e]);
        if (count > 0) run(grad, param(table_.index(l, e, which)), first, count);
        first += count;
      }
    };

    // The combination: d expert_out over expert_out, d shared over shared_out (in place: each row
    // is read for its weight's gradient before it is overwritten), d weights, d gate logit.
    Tensor dweights = make_f32(per_token(z.k), A::workspace, h + "mlp.router.weights.grad");
    Tensor dshared_gate = z.Fs ? make(per_token(), A::workspace, h + "mlp.shared_expert_gate.out.grad") : Tensor{};
    Tensor& dexpert_out = a.expert_out;
    Tensor& dshared = a.shared_out;
    kernels::moe_combine_backward<T>(s, dexpert_out.data_as<T>(), f32(dweights), z.Fs ? dshared.data_as<T>() : nullptr,
                                     z.Fs ? dshared_gate.data_as<T>() : nullptr, dresidual_.data_as<T>(),
                                     a.expert_out.data_as<T>(), f32(a.router_weights), i32(a.expert_rows),
                                     z.Fs ? a.shared_out.data_as<T>() : nullptr,
                                     z.Fs ? a.shared_gate_logit.data_as<T>() : nullptr, z.N, z.k, z.C);
    // The experts: down, SwiGLU (in place over gate and up, as the dense MLP), gate and up.
    {
      Tensor dswiglu = make(rows_of(z.rows, z.Fe), A::workspace, h + "moe.swiglu.out.grad");
      for_each_expert(X::down_weight, [&](Tensor& grad, const Tensor& weight, std::size_t first, std::size_t count) {
        kernels::matmul_backward<T>(s, dswiglu.data_as<T>() + first * z.Fe, grad.data_as<T>(), nullptr,
                                    dexpert_out.data_as<T>() + first * z.C, a.expert_swiglu.data_as<T>() + first * z.Fe,
                                    weight.data_as<T>(), count, z.Fe, z.C);
      });
      a.expert_swiglu.reset();
      dexpert_out.reset();
      kernels::swiglu_backward<T>(s, a.expert_gate.data_as<T>(), a.expert_up.data_as<T>(), dswiglu.data_as<T>(),
                                  a.expert_gate.data_as<T>(), a.expert_up.data_as<T>(), z.rows * z.Fe);
    }
    Tensor& dgate = a.expert_gate;
    Tensor& dup = a.expert_up;
    {
      // The experts' input again (not saved: a copy of mlp_norm's rows), and its gradient through
      // gate and through up, which add.
      Tensor grouped = make(rows_of(z.rows, z.C), A::workspace, h + "moe.in");
      kernels::moe_dispatch<T>(s, grouped.data_as<T>(), a.mlp_norm.data_as<T>(), i32(a.expert_rows), z.N, z.k, z.C);
      // One projection's backward, expert by expert: its weight gradient, and the input gradient
      // it sends back (released: dout, the gradient at its output).
      auto projection_backward = [&](X which, Tensor& dout, const std::string& name) {
        Tensor dinput = make(rows_of(z.rows, z.C), A::workspace, h + name);
        for_each_expert(which, [&](Tensor& grad, const Tensor& weight, std::size_t first, std::size_t count) {
          kernels::matmul_backward<T>(s, dinput.data_as<T>() + first * z.C, grad.data_as<T>(), nullptr,
                                      dout.data_as<T>() + first * z.Fe, grouped.data_as<T>() + first * z.C,
                                      weight.data_as<T>(), count, z.C, z.Fe);
        });
        dout.reset();
        return dinput;
      };
      Tensor dgrouped = projection_backward(X::gate_weight, dgate, "moe.in.grad");
      Tensor dgrouped_up = projection_backward(X::up_weight, dup, "moe.in.grad.up");
      grouped.reset();
      kernels::residual_forward<T>(s, dgrouped.data_as<T>(), dgrouped.data_as<T>(), dgrouped_up.data_as<T>(), z.rows * z.C);
      dgrouped_up.reset();
      // Back to the tokens: each token's k rows add.
      dnorm = make(per_token(z.C), A::workspace, h + "mlp_norm.grad");
      kernels::moe_dispatch_backward<T>(s, dnorm.data_as<T>(), dgrouped.data_as<T>(), i32(a.expert_rows), z.N, z.k, z.C);
    }
    // The router: through the weights (and the load-balancing loss) into the probabilities, then
    // the logits, then the router's linear layer.
    {
      Tensor aux_dprobs;
      if (load_balancing()) {
        aux_dprobs = make_f32({static_cast<std::int64_t>(z.E)}, A::workspace, h + "mlp.router.aux_loss.grad");
        if (device_.computes()) copy_host_to_device(device_, aux_dprobs.data(), aux_loss_dprobs_.data(), z.E * sizeof(float));
      }
      Tensor dlogits = make(per_token(z.E), A::workspace, h + "mlp.router.out.grad");
      kernels::moe_router_backward<T>(s, dlogits.data_as<T>(), f32(dweights), load_balancing() ? f32(aux_dprobs) : nullptr,
                                      f32(a.router_probs), i32(a.router_experts), z.N, z.E, z.k, config_.normalize_top_k);
      aux_dprobs.reset();
      dweights.reset();
      a.router_probs.reset();
      a.router_experts.reset();
      a.router_weights.reset();
      a.expert_rows.reset();
      Tensor dnorm_router = make(per_token(z.C), A::workspace, h + "mlp_norm.grad.router");
      linear_backward(&dnorm_router, g(l, W::router_weight), nullptr, dlogits, a.mlp_norm, p(l, W::router_weight), z.N, z.C, z.E);
      dlogits.reset();
      kernels::residual_forward<T>(s, dnorm.data_as<T>(), dnorm.data_as<T>(), dnorm_router.data_as<T>(), z.N * z.C);
    }
    // The shared expert: its gate (accumulated into dnorm), then its MLP.
    if (z.Fs != 0) {
      kernels::moe_shared_gate_backward<T>(s, dnorm.data_as<T>(), g(l, W::shared_expert_gate_weight).data_as<T>(),
                                           dshared_gate.data_as<T>(), a.mlp_norm.data_as<T>(),
                                           p(l, W::shared_expert_gate_weight).data_as<T>(), z.N, z.C);
      dshared_gate.reset();
      a.shared_gate_logit.reset();
      Tensor dnorm_shared = swiglu_mlp_backward(l, a, dshared, /*consume_dout=*/true, z.Fs, W::shared_gate_weight,
                                                W::shared_up_weight, W::shared_down_weight, h + "mlp.shared_expert.",
                                                h + "mlp_norm.grad.shared_expert");
      kernels::residual_forward<T>(s, dnorm.data_as<T>(), dnorm.data_as<T>(), dnorm_shared.data_as<T>(), z.N * z.C);
    }
  });
  return dnorm;
}

// Called by head_forward once every layer's forward has run (model.h): the routing of all layers
// is known.
double Llama::auxiliary_loss(std::optional<float> dloss) {
  if (!load_balancing()) return 0;
  const std::size_t E = config_.experts, L = config_.layers;
  const double rows = static_cast<double>(L) * static_cast<double>(B_ * T_);  // L N token rows
  std::vector<double> count(E, 0.0), probability(E, 0.0);
  for (const RouterStatistics& layer : router_statistics_)
    for (std::size_t e = 0; e < E && e < layer.counts.size(); ++e) {
      count[e] += static_cast<double>(layer.counts[e]);
      probability[e] += layer.probability_sums[e];
    }
  double aux = 0;  // E sum_e f_e P_e
  for (std::size_t e = 0; e < E; ++e) aux += (count[e] / rows) * (probability[e] / rows);
  aux *= static_cast<double>(E);
  const double coef = config_.router_aux_loss_coef;
  if (dloss) {
    // The cross-entropy's gradient is scaled by dloss per position (1/(N * accumulation) times the
    // loss scale); the loss as a whole by g = dloss * N: d (g coef aux) / d p[row, e] = g coef E c_e / (L N)^2.
    const double g = static_cast<double>(*dloss) * static_cast<double>(B_ * T_);
    aux_loss_dprobs_.assign(E, 0.0f);
    for (std::size_t e = 0; e < E; ++e)
      aux_loss_dprobs_[e] = static_cast<float>(g * coef * static_cast<double>(E) * count[e] / (rows * rows));
  }
  return device_.computes() ? coef * aux : 0;
}

}  // namespace trainmem
