// Gradients on demand, as a trainer strategy: the model holds no gradient between optimizer
// steps. The strategy frees them all when it joins the run and again after every optimizer step
// (Model::release_gradients); the model makes each one at its first write in the backward
// (Model::grad_for_write), so a gradient exists from the backward that first writes it until the
// optimizer has read it.
//
// Memory, against persistent gradients (G = the gradients' bytes, 2 or 4 per parameter):
//   between steps, and through every forward:    G less
//   at a peak inside the backward:               G less the gradients already written by then
// When the persistent run peaks at the head's backward and the on-demand run peaks at the same
// moment (tiny), only the tied embedding's gradient (Vp*C elements) has been written by then:
//     peak(on-demand) = peak(persistent) - G + round(wte gradient)
// which test_gradient_memory checks to the byte. Otherwise the on-demand peak moves later, to
// where the gradients written so far plus the backward's live tensors are largest (small, B=4:
// the last layer's MLP backward, 31.30 MiB against 34.14 persistent): `trainmem estimate --grads
// on-demand` measures it, as it runs this code.
//
// Under ZeRO-1-3 and FSDP the model's gradients are views into the sharding engine's units, which
// make and free their own storage with --grads on-demand (common/sharding/flat_unit.h); this
// strategy then only forgets the views. ZeRO-0 trains the model's own tensors, as on one device.
//
// Correctness: the gradients are the same numbers in the same order of accumulation (a fresh
// gradient is zeroed before the backward adds into it), so parameters after any number of steps
// are bitwise the persistent run's on the CPU, with accumulation, clipping and loss scaling.
#pragma once
#include "common/model/model.h"
#include "common/train/strategy.h"

namespace trainmem::gradient_memory {

class OnDemandGradients : public Strategy {
 public:
  explicit OnDemandGradients(Model& model) { model.release_gradients(); }
  std::string name() const override { return "grads:on-demand"; }
  // After the update, and after a skipped one too (PyTorch's zero_grad runs either way).
  void after_optimizer_step(StepContext& ctx) override { ctx.model.release_gradients(); }
};

}  // namespace trainmem::gradient_memory
