// The reference of the sharding suites' equality tests: ONE process that adds what N
// data-parallel ranks add, in the order they add it. ZeRO (every stage, offload or not) and FSDP
// (every mode) on N ranks must equal it bit for bit, in fp32, bf16 and fp16, whatever BLAS kernel
// runs and however many threads it uses: both runs make the same products of the same shapes, so
// the kernels' summation order is the same on both sides, and no tolerance is needed.
//
// What the ranks compute (N ranks, B rows each, K micro-batches per step):
//   - rank r's k-th micro-batch is rows r*B .. r*B+B-1 of the k-th global batch (SequentialBatches);
//   - each rank's loss is scaled by 1/N (the policies' loss_scale()): the same float factor on
//     the loss as one process of N*K micro-batches of B rows (for N a power of two);
//   - the model's backward accumulates a micro-batch into the gradients it finds (in the model's
//     dtype: each kernel adds in fp32 and rounds once);
//   - the communicator adds the ranks' gradients element by element in rank order in fp32 and
//     rounds once (common/comm/rank_order_sum.h).
// Where a rank's gradients live between micro-steps decides what is added when:
//   whole  (plain data parallelism = ZeRO-0, ZeRO-1, FSDP NO_SHARD): each rank accumulates its
//          K micro-batches into its own gradients; the ranks' sums are reduced once, after the last.
//   shard  (ZeRO-2/3, FSDP FULL_SHARD and SHARD_GRAD_OP): the gradients are reduced after every
//          micro-batch. A rank's next micro-batch starts from zero gradients except on the slice
//          it owns, which holds the reduced sum so far (common/sharding/flat_unit.cpp,
//          open_gradients): there the backward adds to the sum.
// After the reduction both sides run the same AdamW kernel on the same numbers. One grouping
// differs: the global gradient norm's sum of squares (per flat shard, then over the ranks, vs
// per tensor), in double before it is rounded to the one float clip factor; a difference would
// need the double sum to land within 2^-29 relative of a float's rounding boundary.
//
// A lost micro-batch, a wrong slice, a missing 1/N, a gradient reduced twice or a shard seeded
// wrongly changes many bits: the tests compare with EXPECT_EQ.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/comm/rank_order_sum.h"
#include "common/data/batch_source.h"
#include "common/device/device_ops.h"
#include "common/model/model.h"
#include "common/sharding/unit_layout.h"
#include "common/train/strategy.h"
#include "common/train/trainer.h"

namespace trainmem::testing_support {

enum class GradientHome { whole, shard };

// N ranks' batches in the order one process runs them: micro-step m of a step is micro-batch
// m / N of rank m % N (every rank's k-th micro-batch before any rank's (k+1)-th).
class RankInterleavedBatches : public BatchSource {
 public:
  RankInterleavedBatches(Device& device, const std::vector<std::uint16_t>& corpus, std::size_t B, std::size_t T,
                         std::size_t world) {
    for (std::size_t r = 0; r < world; ++r) ranks_.emplace_back(device, corpus, B, T, r, world);
  }
  void next(Tensor& tokens, Tensor& targets) override {
    ranks_[next_rank_].next(tokens, targets);
    next_rank_ = (next_rank_ + 1) % ranks_.size();
  }

 private:
  std::vector<SequentialBatches> ranks_;
  std::size_t next_rank_ = 0;
};

// The ranks' gradients, kept between their micro-steps, and their reduction in rank order.
// Listed with a Trainer of batch B and accumulation N*K over RankInterleavedBatches.
class SimulatedRanks : public Strategy {
 public:
  // shard: `units` is the plan's layout over N ranks (who owns which element).
  SimulatedRanks(Model& model, std::size_t world, GradientHome home, const std::vector<UnitLayout>& units = {})
      : model_(model), world_(world), home_(home), kept_(world) {
    const std::vector<Parameter>& params = model_.parameters();
    owner_.resize(params.size());
    if (home_ == GradientHome::shard) {
      if (units.empty()) throw std::invalid_argument("SimulatedRanks: shard needs the plan's units");
      for (const UnitLayout& u : units)
        for (std::size_t k = 0; k < u.parameters.size(); ++k) {
          const std::size_t p = u.parameters[k];
          owner_[p].resize(static_cast<std::size_t>(params[p].value.numel()));
          for (std::size_t e = 0; e < owner_[p].size(); ++e) owner_[p][e] = (u.offsets[k] + e) / u.shard_numel;
        }
    }
  }
  std::string name() const override { return "simulated_ranks"; }

  // Before rank r's micro-batch k: the gradients that rank's backward finds.
  void on_data_fetch(StepContext& ctx) override {
    const std::size_t r = ctx.micro_step % world_, k = ctx.micro_step / world_;
    if (home_ == GradientHome::whole) {
      if (k == 0)
        model_.zero_grad();
      else
        write_gradients(kept_[r]);
      return;
    }
    model_.zero_grad();
    if (k == 0) return;
    std::vector<std::vector<std::byte>> seeded = zeros_like(reduced_);
    const std::size_t es = dtype_size(model_.dtype());
    for (std::size_t p = 0; p < seeded.size(); ++p)
      for (std::size_t e = 0; e < owner_[p].size(); ++e)
        if (owner_[p][e] == r) std::memcpy(&seeded[p][e * es], &reduced_[p][e * es], es);
    write_gradients(seeded);
  }

  // After it: keep that rank's gradients; after the last rank's, reduce where the plan reduces.
  void after_backward(StepContext& ctx) override {
    const std::size_t r = ctx.micro_step % world_, k = ctx.micro_step / world_;
    const std::size_t micro_batches = ctx.trainer.options().accumulation_steps / world_;
    kept_[r] = read_gradients();
    if (r + 1 < world_) return;
    if (home_ == GradientHome::whole && k + 1 < micro_batches) return;
    reduced_ = reduce_in_rank_order();
    if (k + 1 == micro_batches) write_gradients(reduced_);  // what the optimizer reads
  }

 private:
  using Gradients = std::vector<std::vector<std::byte>>;  // per parameter, its raw elements

  Gradients read_gradients() const {
    Gradients g;
    for (const Parameter& p : model_.parameters()) {
      g.emplace_back(p.grad.nbytes());
      copy_device_to_host(model_.device(), g.back().data(), p.grad.data(), p.grad.nbytes());
    }
    return g;
  }
  void write_gradients(const Gradients& g) {
    std::vector<Parameter>& params = model_.parameters();
    for (std::size_t p = 0; p < params.size(); ++p)
      copy_host_to_device(model_.device(), params[p].grad.data(), g[p].data(), g[p].size());
  }
  static Gradients zeros_like(const Gradients& g) {
    Gradients z;
    for (const auto& v : g) z.emplace_back(v.size(), std::byte{0});
    return z;
  }
  // Every element: the ranks' values added in rank order in fp32, rounded once to the dtype.
  Gradients reduce_in_rank_order() const {
    const DType dtype = model_.dtype();
    const std::size_t es = dtype_size(dtype);
    Gradients sum = zeros_like(kept_[0]);
    for (std::size_t p = 0; p < sum.size(); ++p) {
      const std::size_t n = sum[p].size() / es;
      std::vector<std::byte> blocks;  // rank 0's elements, then rank 1's, ...
      for (const Gradients& rank : kept_) blocks.insert(blocks.end(), rank[p].begin(), rank[p].end());
      std::vector<float> wide(n);
      add_in_rank_order(blocks.data(), world_, n, dtype, wide.data());
      round_elements(dtype, wide.data(), sum[p].data(), n);
    }
    return sum;
  }

  Model& model_;
  std::size_t world_;
  GradientHome home_;
  std::vector<std::vector<std::size_t>> owner_;  // shard: the rank that owns each element of each parameter
  std::vector<Gradients> kept_;                  // each rank's gradients after its latest micro-batch
  Gradients reduced_;                            // the latest reduction
};

// `steps` optimizer steps of N ranks of B rows made in this process on `model` (its device's
// tokens from `corpus`), each rank with `per_rank`'s options (K = its accumulation steps) and the
// loss scaled by a static `loss_scale`: the fp32 master weights (an fp32 model's parameters).
inline std::vector<float> data_parallel_masters(Model& model, const std::vector<std::uint16_t>& corpus, std::size_t world,
                                                GradientHome home, const std::vector<UnitLayout>& units,
                                                TrainerOptions per_rank, double loss_scale, long steps) {
  struct StaticLossScale : Strategy {
    double scale = 1;
    std::string name() const override { return "static_loss_scale"; }
    double loss_scale() const override { return scale; }
  } scale;
  scale.scale = loss_scale;
  RankInterleavedBatches data(model.device(), corpus, per_rank.batch, per_rank.seq, world);
  SimulatedRanks ranks(model, world, home, units);
  per_rank.accumulation_steps *= world;  // every rank's micro-batches, one after another
  Trainer trainer(model, data, per_rank, {&ranks, &scale});
  for (long i = 0; i < steps; ++i) trainer.step();
  return trainer.optimizer().has_master_weights() ? trainer.optimizer().master_values() : model.parameter_values();
}

}  // namespace trainmem::testing_support
