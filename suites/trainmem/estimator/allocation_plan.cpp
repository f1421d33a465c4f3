#include "suites/trainmem/estimator/allocation_plan.h"

#include <algorithm>
#include <initializer_list>
#include <stdexcept>

namespace trainmem::estimator {

std::string to_string(Phase phase) {
  switch (phase) {
    case Phase::setup: return "setup";
    case Phase::forward: return "forward";
    case Phase::backward: return "backward";
    case Phase::optimizer: return "optimizer";
  }
  return "?";
}

namespace {

// "h3." for layer 3 (built with +=: GCC 12 warns falsely about "h" + std::to_string(l)).
std::string layer_prefix(std::size_t l) {
  std::string s = "h";
  s += std::to_string(l);
  s += ".";
  return s;
}

// A tensor of the plan: its id (0: none) and its number of elements, so that a view of it
// knows its fp32 size.
struct PlanTensor {
  std::size_t id = 0;
  std::size_t numel = 0;
  bool f32 = false;  // stored in fp32 whatever the precision (layernorm statistics, lse, losses)
  std::string name;
  explicit operator bool() const { return id != 0; }
};

// One layer's saved tensors, in the declaration order of LayerActivations (gpt.h): the order in
// which `a = LayerActivations{}` frees them.
struct PlanLayer {
  PlanTensor ln1, ln1_mean, ln1_rstd, qkv, att, lse, atty, residual2, ln2, ln2_mean, ln2_rstd, fch, fch_gelu;
};

// Emits the plan: the model, loader, trainer and optimizer of common/ and suites/, reduced to
// their allocations.
class Planner {
 public:
  explicit Planner(const TrainingSetup& s)
      : s_(s),
        B_(s.batch),
        T_(s.seq()),
        C_(s.model.dim),
        H_(s.model.heads),
        L_(s.model.layers),
        V_(s.model.vocab),
        e_(dtype_size(storage_dtype(s.precision))),
        sixteen_(s.precision != Precision::fp32),
        gpu_(s.backend == DeviceKind::cuda) {}

  std::vector<PlannedOp> run(int steps, std::size_t max_micro) {
    setup();
    const std::size_t micro = std::min(s_.accum, std::max<std::size_t>(max_micro, 1));
    for (int step = 1; step <= steps; ++step) {
      step_ = step;
      for (std::size_t m = 0; m < micro; ++m) micro_step();
      optimizer_step();
    }
    return std::move(ops_);
  }

 private:
  // --- primitives ----------------------------------------------------------------------------

  PlanTensor alloc(std::size_t numel, std::size_t element_bytes, MemoryCategory c, std::string name) {
    PlanTensor t;
    t.numel = numel;
    t.f32 = element_bytes == 4 && sixteen_;
    t.name = name;
    if (numel * element_bytes == 0) return t;  // the allocator hands out nothing for 0 bytes
    t.id = next_id_++;
    PlannedOp op;
    op.kind = PlannedOp::Kind::alloc;
    op.id = t.id;
    op.bytes = numel * element_bytes;
    op.category = c;
    op.phase = phase_;
    op.step = step_;
    op.name = std::move(name);
    ops_.push_back(std::move(op));
    return t;
  }
  // GPT::make (the model's storage type) and GPT::make_f32.
  PlanTensor make(std::size_t numel, MemoryCategory c, std::string name) { return alloc(numel, e_, c, std::move(name)); }
  PlanTensor make_f32(std::size_t numel, MemoryCategory c, std::string name) {
    return alloc(numel, 4, c, std::move(name));
  }
  void free(PlanTensor& t) {  // Tensor::reset
    if (t.id == 0) return;
    PlannedOp op;
    op.kind = PlannedOp::Kind::free;
    op.id = t.id;
    op.phase = phase_;
    op.step = step_;
    ops_.push_back(std::move(op));
    t = PlanTensor{};
  }

  // An fp32 view of a tensor (compute_views.cpp): scratch of numel * 4 bytes, category
  // workspace, when the tensor is stored in 16 bits; nothing when it is fp32.
  PlanTensor view(const PlanTensor& t) {
    if (!sixteen_ || t.f32) return PlanTensor{};
    return alloc(t.numel, 4, MemoryCategory::workspace, t.name + ".f32");
  }
  // The views made as one call's arguments, listed in the source's (left-to-right) order: made
  // right to left, and destroyed at the end of the statement in reverse order of making.
  void call(std::initializer_list<const PlanTensor*> args) {
    std::vector<const PlanTensor*> in_order(args);
    std::vector<PlanTensor> made;
    for (auto it = in_order.rbegin(); it != in_order.rend(); ++it) made.push_back(view(**it));
    for (auto it = made.rbegin(); it != made.rend(); ++it) free(*it);
  }
  // A matmul (GPT::linear_forward / linear_backward): on a GPU in 16 bits the operands go to the
  // tensor cores as they are (no views).
  bool matmul_views() const { return !(gpu_ && sixteen_); }

  // --- setup: GPT::GPT, the loader, Trainer::Trainer (with AdamWOptimizer::AdamWOptimizer) -----

  void setup() {
    phase_ = Phase::setup;
    // GPT::GPT: every parameter and its gradient, in parameters() order.
    auto add = [&](const std::string& name, std::size_t numel) {
      params_.push_back(make(numel, MemoryCategory::parameters, name));
      grads_.push_back(make(numel, MemoryCategory::gradients, name + ".grad"));
    };
    add("wte", V_ * C_);
    add("wpe", s_.model.seq * C_);
    for (std::size_t l = 0; l < L_; ++l) {
      const std::string h = layer_prefix(l);
      add(h + "ln1.weight", C_);
      add(h + "ln1.bias", C_);
      add(h + "attn.qkv.weight", 3 * C_ * C_);
      add(h + "attn.qkv.bias", 3 * C_);
      add(h + "attn.proj.weight", C_ * C_);
      add(h + "attn.proj.bias", C_);
      add(h + "ln2.weight", C_);
      add(h + "ln2.bias", C_);
      add(h + "mlp.fc.weight", 4 * C_ * C_);
      add(h + "mlp.fc.bias", 4 * C_);
      add(h + "mlp.proj.weight", 4 * C_ * C_);
      add(h + "mlp.proj.bias", C_);
    }
    add("lnf.weight", C_);
    add("lnf.bias", C_);
    // GPT::set_parameter_values: one fp32 Write view per parameter, made and dropped in turn.
    for (const PlanTensor& p : params_) {
      PlanTensor w = view(p);
      free(w);
    }
    // The data loader (trainmem train builds it after the model).
    if (s_.loader == Loader::eager) {
      loader_.push_back(alloc(s_.eager_tokens(), 4, MemoryCategory::data, "dataset.tokens"));  // EagerLoader: int32
    } else if (s_.loader == Loader::lazy) {
      for (std::size_t i = 0; i < s_.prefetch; ++i) {  // LazyLoader: a ring of prefetch slots
        std::string slot = "prefetch";
        slot += std::to_string(i);
        loader_.push_back(alloc(B_ * T_, 4, MemoryCategory::data, slot + ".tokens"));
        loader_.push_back(alloc(B_ * T_, 4, MemoryCategory::data, slot + ".targets"));
      }
    }
    // Trainer::Trainer: its AdamWOptimizer first (fp32 master weights of a 16-bit model), then
    // the device's copy of the batch.
    if (sixteen_)
      for (const PlanTensor& p : params_)
        master_.push_back(alloc(p.numel, 4, MemoryCategory::optimizer_state, p.name + ".master"));
    tokens_ = alloc(B_ * T_, 4, MemoryCategory::data, "batch.tokens");
    targets_ = alloc(B_ * T_, 4, MemoryCategory::data, "batch.targets");
  }

  // Parameter and gradient of layer l's `which`-th tensor (the order of GPT::GPT's specs).
  enum LayerParam : std::size_t { kLn1W, kLn1B, kQkvW, kQkvB, kProjW, kProjB, kLn2W, kLn2B, kFcW, kFcB, kFcProjW, kFcProjB };
  const PlanTensor& p(std::size_t l, std::size_t which) const { return params_[2 + l * 12 + which]; }
  const PlanTensor& g(std::size_t l, std::size_t which) const { return grads_[2 + l * 12 + which]; }
  std::size_t lnf() const { return 2 + L_ * 12; }

  // --- one micro-step: Trainer::micro_step ------------------------------------------------------

  void micro_step() {
    phase_ = Phase::forward;
    residual_.assign(L_ + 1, PlanTensor{});
    layers_.assign(L_, PlanLayer{});
    embed_forward();
    const std::size_t k = RecomputePolicy::sqrt_segment(L_);
    for (std::size_t l = 0; l < L_; ++l) {
      forward_layer(l, true);
      // RecomputeStrategy::after_layer_forward
      const RecomputePolicy& r = s_.recompute;
      if (r.selective()) {
        free(layers_[l].att);
        free(layers_[l].fch_gelu);
      } else if (r.kind == RecomputePolicy::Kind::sqrt) {
        release_layer(l);
        if (l % k != 0) free(residual_[l]);
      } else if (r.recomputes(l)) {
        release_layer(l);
      }
    }
    head_forward();
    phase_ = Phase::backward;
    head_backward();
    for (std::size_t l = L_; l-- > 0;) {
      // RecomputeStrategy::before_layer_backward
      const RecomputePolicy& r = s_.recompute;
      if (r.selective()) {
        recompute_selective(l);
      } else if (r.kind == RecomputePolicy::Kind::sqrt) {
        const std::size_t first = l / k * k, last = std::min(first + k, L_) - 1;
        if (l == last)
          for (std::size_t j = first; j <= last; ++j) forward_layer(j, j < last);
      } else if (r.recomputes(l)) {
        forward_layer(l, false);
      }
      layer_backward(l);
    }
    embed_backward();
  }

  // `a = LayerActivations{}`: frees the saved tensors in declaration order.
  void release_layer(std::size_t l) {
    PlanLayer& a = layers_[l];
    for (PlanTensor* t : {&a.ln1, &a.ln1_mean, &a.ln1_rstd, &a.qkv, &a.att, &a.lse, &a.atty, &a.residual2, &a.ln2,
                          &a.ln2_mean, &a.ln2_rstd, &a.fch, &a.fch_gelu})
      free(*t);
  }

  // GPT::linear_forward: matmul_forward(s, out(y), in(x), in(weight), in(bias)).
  void linear_forward(const PlanTensor& y, const PlanTensor& x, const PlanTensor& w, const PlanTensor* bias) {
    if (!matmul_views()) return;
    if (bias) call({&y, &x, &w, bias});
    else call({&y, &x, &w});
  }
  // GPT::linear_backward: the optional views of dinp (Write) and dbias (Update) live to the end
  // of the function; matmul_backward(s, dinp, inout(dweight), dbias, in(dout), in(inp), in(weight)).
  void linear_backward(const PlanTensor* dinp, const PlanTensor& dweight, const PlanTensor* dbias, const PlanTensor& dout,
                       const PlanTensor& inp, const PlanTensor& weight) {
    if (!matmul_views()) return;
    PlanTensor dinp_view = dinp ? view(*dinp) : PlanTensor{};
    PlanTensor dbias_view = dbias ? view(*dbias) : PlanTensor{};
    call({&dweight, &dout, &inp, &weight});
    free(dbias_view);  // locals go in reverse order of declaration
    free(dinp_view);
  }

  // GPT::embed_forward
  void embed_forward() {
    residual_[0] = make(B_ * T_ * C_, MemoryCategory::activations, "x0");
    call({&residual_[0], &params_[0], &params_[1]});  // embedding_forward(out(x0), tokens, in(wte), in(wpe))
  }

  // GPT::forward_layer (attention_forward inlined)
  void forward_layer(std::size_t l, bool produce_output) {
    const std::string h = layer_prefix(l);
    const std::size_t btc = B_ * T_ * C_, bt = B_ * T_;
    const PlanTensor& x = residual_[l];
    PlanLayer& a = layers_[l];
    a.ln1 = make(btc, MemoryCategory::activations, h + "ln1");
    a.ln1_mean = make_f32(bt, MemoryCategory::activations, h + "ln1.mean");
    a.ln1_rstd = make_f32(bt, MemoryCategory::activations, h + "ln1.rstd");
    call({&a.ln1, &x, &p(l, kLn1W), &p(l, kLn1B)});  // layernorm_forward(out, mean, rstd, in(x), in(w), in(b))
    a.qkv = make(3 * btc, MemoryCategory::activations, h + "qkv");
    linear_forward(a.qkv, a.ln1, p(l, kQkvW), &p(l, kQkvB));
    attention_forward(a, h);
    a.residual2 = make(btc, MemoryCategory::activations, h + "residual2");
    {
      PlanTensor proj = make(btc, MemoryCategory::workspace, h + "attn.proj.out");
      linear_forward(proj, a.atty, p(l, kProjW), &p(l, kProjB));
      call({&a.residual2, &x, &proj});  // residual_forward(out(residual2), in(x), in(proj))
      free(proj);
    }
    a.ln2 = make(btc, MemoryCategory::activations, h + "ln2");
    a.ln2_mean = make_f32(bt, MemoryCategory::activations, h + "ln2.mean");
    a.ln2_rstd = make_f32(bt, MemoryCategory::activations, h + "ln2.rstd");
    call({&a.ln2, &a.residual2, &p(l, kLn2W), &p(l, kLn2B)});
    a.fch = make(4 * btc, MemoryCategory::activations, h + "mlp.fc.out");
    linear_forward(a.fch, a.ln2, p(l, kFcW), &p(l, kFcB));
    a.fch_gelu = make(4 * btc, MemoryCategory::activations, h + "mlp.gelu.out");
    call({&a.fch_gelu, &a.fch});  // gelu_forward(out(gelu), in(fch))
    if (!produce_output) return;
    std::string xname = "x";
    xname += std::to_string(l + 1);
    residual_[l + 1] = make(btc, MemoryCategory::activations, xname);
    {
      PlanTensor proj = make(btc, MemoryCategory::workspace, h + "mlp.proj.out");
      linear_forward(proj, a.fch_gelu, p(l, kFcProjW), &p(l, kFcProjB));
      call({&residual_[l + 1], &a.residual2, &proj});
      free(proj);
    }
  }

  // GPT::attention_forward
  void attention_forward(PlanLayer& a, const std::string& h) {
    const std::size_t btc = B_ * T_ * C_, bhtt = B_ * H_ * T_ * T_;
    if (s_.attention == AttentionKind::naive) {
      a.att = make(bhtt, MemoryCategory::activations, h + "attn.probs");
      a.atty = make(btc, MemoryCategory::activations, h + "attn.out");
      PlanTensor preatt = make(bhtt, MemoryCategory::workspace, h + "attn.scores");
      call({&a.atty, &preatt, &a.att, &a.qkv});  // attention_forward(out(atty), out(preatt), out(att), in(qkv))
      free(preatt);
      return;
    }
    a.atty = make(btc, MemoryCategory::activations, h + "attn.out");
    a.lse = make_f32(B_ * H_ * T_, MemoryCategory::activations, h + "attn.lse");
    if (!gpu_) call({&a.atty, &a.qkv});  // cpu::flash_attention_forward(out(atty), lse, in(qkv))
    // GPU flash / cuDNN: 16-bit in, 16-bit out, no views. (cuDNN's forward workspace is not
    // modelled: it depends on the cuDNN version; it is small and freed at once.)
  }

  // GPT::head_forward
  void head_forward() {
    const std::size_t btc = B_ * T_ * C_, bt = B_ * T_;
    lnf_ = make(btc, MemoryCategory::activations, "lnf");
    lnf_mean_ = make_f32(bt, MemoryCategory::activations, "lnf.mean");
    lnf_rstd_ = make_f32(bt, MemoryCategory::activations, "lnf.rstd");
    call({&lnf_, &residual_[L_], &params_[lnf()], &params_[lnf() + 1]});
    logits_ = make(bt * V_, MemoryCategory::activations, "logits");
    linear_forward(logits_, lnf_, params_[0], nullptr);
    PlanTensor losses = make_f32(bt, MemoryCategory::workspace, "losses");
    call({&logits_});  // cross_entropy_forward(losses, in(logits), targets)
    free(losses);
  }

  // GPT::head_backward
  void head_backward() {
    const std::size_t btc = B_ * T_ * C_;
    {
      PlanTensor logits_update = view(logits_);  // Update logits(device_, logits_)
      free(logits_update);
    }
    PlanTensor dlnf = make(btc, MemoryCategory::workspace, "lnf.grad");
    linear_backward(&dlnf, grads_[0], nullptr, logits_, lnf_, params_[0]);
    free(logits_);
    dresidual_ = make(btc, MemoryCategory::workspace, "residual.grad");
    // layernorm_backward(inout(dres), inout(dw), inout(db), in(dlnf), in(x_L), in(w), mean, rstd)
    call({&dresidual_, &grads_[lnf()], &grads_[lnf() + 1], &dlnf, &residual_[L_], &params_[lnf()]});
    free(lnf_);
    free(lnf_mean_);
    free(lnf_rstd_);
    free(residual_[L_]);
    free(dlnf);
  }

  // GPT::layer_backward (attention_backward inlined)
  void layer_backward(std::size_t l) {
    const std::string h = layer_prefix(l);
    const std::size_t btc = B_ * T_ * C_, bhtt = B_ * H_ * T_ * T_;
    PlanLayer& a = layers_[l];
    PlanTensor& dres = dresidual_;
    {  // MLP branch
      PlanTensor dfch = make(4 * btc, MemoryCategory::workspace, h + "mlp.gelu.out.grad");
      linear_backward(&dfch, g(l, kFcProjW), &g(l, kFcProjB), dres, a.fch_gelu, p(l, kFcProjW));
      {
        PlanTensor d = view(dfch);  // Update d(device_, dfch)
        call({&a.fch});             // gelu_backward(d, in(fch), d)
        free(d);
      }
      PlanTensor dln2 = make(btc, MemoryCategory::workspace, h + "ln2.grad");
      linear_backward(&dln2, g(l, kFcW), &g(l, kFcB), dfch, a.ln2, p(l, kFcW));
      call({&dres, &g(l, kLn2W), &g(l, kLn2B), &dln2, &a.residual2, &p(l, kLn2W)});  // layernorm_backward
      free(dln2);
      free(dfch);
    }
    {  // attention branch
      PlanTensor datty = make(btc, MemoryCategory::workspace, h + "attn.out.grad");
      linear_backward(&datty, g(l, kProjW), &g(l, kProjB), dres, a.atty, p(l, kProjW));
      PlanTensor dqkv = make(3 * btc, MemoryCategory::workspace, h + "qkv.grad");
      if (s_.attention == AttentionKind::naive) {
        PlanTensor dpreatt = make(bhtt, MemoryCategory::workspace, h + "attn.scores.grad");
        PlanTensor datt = make(bhtt, MemoryCategory::workspace, h + "attn.probs.grad");
        // attention_backward(out(dqkv), out(dpreatt), out(datt), in(datty), in(qkv), in(att))
        call({&dqkv, &dpreatt, &datt, &datty, &a.qkv, &a.att});
        free(datt);
        free(dpreatt);
      } else if (!gpu_) {
        call({&dqkv, &datty, &a.qkv, &a.atty});  // cpu::flash_attention_backward(out(dqkv), in(datty), in(qkv), in(atty), lse)
      } else if (s_.attention == AttentionKind::flash) {
        // kernels/cuda/flash_attention.cu: D = rowsum(dO * O) and the fp32 dQ accumulator,
        // B*H*T*(D + 1) floats (versions 2 and 3, the ones a GPU of sm_80+ runs).
        const std::size_t head_dim = C_ / H_;
        PlanTensor ws = alloc(B_ * H_ * T_ * (head_dim + 1), 4, MemoryCategory::workspace, h + "attn.flash.workspace");
        free(ws);
      }
      PlanTensor dln1 = make(btc, MemoryCategory::workspace, h + "ln1.grad");
      linear_backward(&dln1, g(l, kQkvW), &g(l, kQkvB), dqkv, a.ln1, p(l, kQkvW));
      call({&dres, &g(l, kLn1W), &g(l, kLn1B), &dln1, &residual_[l], &p(l, kLn1W)});
      free(dln1);
      free(dqkv);
      free(datty);
    }
    release_layer(l);
    free(residual_[l]);
  }

  // GPT::recompute_selective
  void recompute_selective(std::size_t l) {
    const std::string h = layer_prefix(l);
    const std::size_t btc = B_ * T_ * C_, bhtt = B_ * H_ * T_ * T_;
    PlanLayer& a = layers_[l];
    if (s_.attention == AttentionKind::naive) {
      a.att = make(bhtt, MemoryCategory::activations, h + "attn.probs");
      PlanTensor preatt = make(bhtt, MemoryCategory::workspace, h + "attn.scores");
      PlanTensor atty = make(btc, MemoryCategory::workspace, h + "attn.out.recomputed");
      call({&atty, &preatt, &a.att, &a.qkv});
      free(atty);  // the block's locals, in reverse order of declaration
      free(preatt);
    }
    a.fch_gelu = make(4 * btc, MemoryCategory::activations, h + "mlp.gelu.out");
    call({&a.fch_gelu, &a.fch});
  }

  // GPT::embed_backward: embedding_backward(inout(dwte), inout(dwpe), in(dres), tokens)
  void embed_backward() {
    call({&grads_[0], &grads_[1], &dresidual_});
    free(dresidual_);
  }

  // Trainer::step after the micro-steps: AdamWOptimizer::step.
  void optimizer_step() {
    phase_ = Phase::optimizer;
    // global_grad_norm: a Read view of every gradient in turn (on a GPU, into one accumulator).
    PlanTensor accumulator = gpu_ ? make_f32(1, MemoryCategory::workspace, "grad_norm.accumulator") : PlanTensor{};
    for (const PlanTensor& gr : grads_) call({&gr});
    free(accumulator);
    if (moments_.empty())  // Adam's m and v, at the first step
      for (const PlanTensor& p : params_) {
        moments_.push_back(alloc(p.numel, 4, MemoryCategory::optimizer_state, p.name + ".adam_m"));
        moments_.push_back(alloc(p.numel, 4, MemoryCategory::optimizer_state, p.name + ".adam_v"));
      }
    // The update: a 16-bit model's gradient is read through a view, tensor by tensor.
    if (!master_.empty())
      for (const PlanTensor& gr : grads_) call({&gr});
  }

  const TrainingSetup& s_;
  const std::size_t B_, T_, C_, H_, L_, V_, e_;
  const bool sixteen_, gpu_;

  std::vector<PlannedOp> ops_;
  std::size_t next_id_ = 1;
  Phase phase_ = Phase::setup;
  int step_ = 0;

  std::vector<PlanTensor> params_, grads_, master_, moments_, loader_;
  PlanTensor tokens_, targets_;
  std::vector<PlanTensor> residual_;
  std::vector<PlanLayer> layers_;
  PlanTensor lnf_, lnf_mean_, lnf_rstd_, logits_, dresidual_;
};

}  // namespace

std::vector<PlannedOp> plan_training(const TrainingSetup& setup, int steps, std::size_t max_micro_batches) {
  setup.validate();
  if (steps < 1) throw std::invalid_argument("plan_training: at least one step");
  return Planner(setup).run(steps, max_micro_batches);
}

}  // namespace trainmem::estimator
